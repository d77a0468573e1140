"""Command-line quality shared by every console script: `--help` is fast and imports no heavy package, one flag
spelling (underscores, dashes accepted as aliases), user errors are one line with exit status 2."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT

from xlpe.cli import (
    CommandLineError,
    canonical_flags,
    check_model_path,
    looks_like_local_path,
)


def console_scripts() -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(REPO_ROOT / "setup.cfg")
    lines = [line.strip() for line in parser["options.entry_points"]["console_scripts"].splitlines() if line.strip()]
    return {name.strip(): target.strip() for name, target in (line.split("=") for line in lines)}


HEAVY = ("torch", "transformers", "datasets", "sacrebleu")
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}


def run_script(target: str, *args: str, env=None, timeout=120) -> tuple[subprocess.CompletedProcess, float]:
    module, function = target.split(":")
    code = f"import sys; sys.argv[0] = 'prog'; from {module} import {function}; sys.exit({function}())"
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env or ENV
    )
    return result, time.perf_counter() - started


@pytest.mark.parametrize("name", sorted(console_scripts()))
def test_help_is_fast(name, tmp_path):
    """Every console script answers --help in well under 5 s (target: 2 s on an idle machine). xlpe-train's help
    (transformers' training arguments import torch) is built once and then served from the cache."""
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path)}
    target = console_scripts()[name]
    if name == "xlpe-train":
        first, _ = run_script(target, "--help", env=env, timeout=300)  # fills the cache
        assert first.returncode == 0, first.stderr[-2000:]
    result, seconds = run_script(target, "--help", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and result.stderr == ""
    assert seconds < 5.0, f"{name} --help took {seconds:.1f} s"
    if name == "xlpe-train":
        assert result.stdout == first.stdout and "--model_name_or_path" in result.stdout


def test_cli_modules_and_parsers_do_not_import_heavy_packages():
    code = (
        "import sys\n"
        "import xlpe, xlpe.cli.translate as t, xlpe.cli.evaluate as e, xlpe.cli.push as p, xlpe.cli.demo, "
        "xlpe.cli.train\n"
        "import xlpe.cli.prepare as pr, xlpe.cli.reorder as r, xlpe.cli.tagger as tg\n"
        "t.build_parser(); e.build_parser(); p._parser(); pr._parser(); r.build_parser(); tg.build_parser()\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


IMPORTS = {
    "transformers first": "import transformers\nimport xlpe\n",  # import xlpe registers at once
    "xlpe first, then register": "import xlpe\nimport transformers\nxlpe.register()\n",
    "xlpe first, then a name of xlpe": "import xlpe\nimport transformers\nfrom xlpe import XLPEMarianConfig\n",
}


@pytest.mark.parametrize("order", sorted(IMPORTS))
def test_the_families_are_registered_with_the_auto_classes(order):
    imports = IMPORTS[order]
    code = (
        "import sys\n" + imports + "from transformers import AutoConfig, AutoModelForSeq2SeqLM\n"
        "names = [type(AutoConfig.for_model(t)).__name__ "
        "for t in ('xlpe_marian', 'dpe_marian', 'mvpe_pos', 'xlpe_reorderer')]\n"
        "model = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model('xlpe_marian', vocab_size=20, d_model=8, "
        "encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, "
        "encoder_ffn_dim=8, decoder_ffn_dim=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))\n"
        "print(names, type(model).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        result.stdout.strip()
        == "['XLPEMarianConfig', 'DPEMarianConfig', 'MvPEPosConfig', 'XLPEReordererConfig'] XLPEMarianMTModel"
    )


def test_spelled_out_choices_match_the_library():
    from xlpe.cli import evaluate, prepare, reorder
    from xlpe.evaluation import alignment_quality
    from xlpe.features import prepare as features_prepare
    from xlpe.features.example_features import FEATURES
    from xlpe.models.configuration_reorderer import TRAINING_LOSSES

    assert evaluate.PROJECTIONS == alignment_quality.PROJECTIONS
    assert tuple(prepare.FEATURE_CHOICES) == tuple(FEATURES)
    assert prepare.PREPARED_TOKENIZER_DIR == features_prepare.PREPARED_TOKENIZER_DIR
    assert tuple(reorder.TRAINING_LOSSES) == tuple(TRAINING_LOSSES)
    from xlpe.features import sharded

    assert (prepare.DEFAULT_SHARD_SIZE, prepare.DEFAULT_ALIGNMENT_SAMPLE, prepare.DEFAULT_TOKENIZER_SAMPLE) == (
        sharded.DEFAULT_SHARD_SIZE,
        sharded.DEFAULT_ALIGNMENT_SAMPLE,
        sharded.DEFAULT_TOKENIZER_SAMPLE,
    )
    assert prepare.DEFAULT_SHARD_EFLOMAL_OPTIONS == sharded.DEFAULT_SHARD_EFLOMAL_OPTIONS


# ---------------------------------------------------------------------------------------------------------
# One flag spelling
# ---------------------------------------------------------------------------------------------------------


def test_underscore_is_shown_and_dash_is_an_alias():
    from xlpe.cli import evaluate, prepare, reorder, translate

    parser = translate.build_parser()
    assert parser.parse_args(["--model", "m", "--num-beams", "3", "--batch-size", "2"]).num_beams == 3
    assert parser.parse_args(["--model", "m", "--num_beams", "3"]).num_beams == 3
    help_text = parser.format_help()
    assert "--num_beams" in help_text and "--num-beams" not in help_text
    args = evaluate.build_parser().parse_args(
        ["bleu", "--hyp", "h", "--ref", "r", "--bleu-tokenize", "zh", "--dataset-name", "x"]
    )
    assert (args.tokenize, args.dataset_name) == ("zh", "x")
    for spelling in ("--source-lang", "--source_lang"):
        assert prepare._parser().parse_args(["--output", "o", spelling, "en"]).source_lang == "en"
    assert "--source_lang" in prepare._parser().format_help()
    for spelling in ("--output-dir", "--output_dir"):
        args = reorder.build_parser().parse_args(
            ["train", "--source", "s", "--target", "t", spelling, "d", "--batch-size", "8"]
        )
        assert (args.output_dir, args.batch_size) == ("d", 8)


def test_colliding_spellings_are_refused():
    import argparse

    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--a_b")
    parser.add_argument("--a-b", dest="other")
    with pytest.raises(ValueError, match="would name two options"):
        canonical_flags(parser)


# ---------------------------------------------------------------------------------------------------------
# User errors: one line, exit 2
# ---------------------------------------------------------------------------------------------------------


def one_error_line(capsys, prog: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), captured.err
    return lines[0]


def test_translate_missing_input_and_missing_model(tmp_path, capsys, monkeypatch):
    from xlpe.cli.translate import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert main(["--model", str(tmp_path), "--input", "missing.txt"]) == 2
    assert "--input missing.txt: no such file" in one_error_line(capsys, "xlpe-translate")
    (tmp_path / "in.txt").write_text("a\n")
    assert main(["--model", "runs/dmeo", "--input", "in.txt"]) == 2
    line = one_error_line(capsys, "xlpe-translate")
    assert "runs/dmeo: no such local directory" in line and "huggingface.co" not in line
    assert main(["--model", str(tmp_path), "--batch_size", "0"]) == 2  # before any work: one line
    assert "--batch_size must be >= 1, got 0" in one_error_line(capsys, "xlpe-translate")


def test_model_path_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for value in ("./model", "/nonexistent/model", "~/m", "a/b/c", "runs/dmeo", "nothere/"):
        assert looks_like_local_path(value), value
        with pytest.raises(CommandLineError, match="no such local directory"):
            check_model_path(value, "--model")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    check_model_path("Helsinki-NLP/opus-mt-en-de", "--model")  # a Hub id: left to the Hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CommandLineError, match="HF_HUB_OFFLINE"):
        check_model_path("Helsinki-NLP/opus-mt-en-de", "--model")
    check_model_path(str(tmp_path / "runs"), "--model")  # an existing directory is fine


def test_evaluate_user_errors(tmp_path, capsys):
    from xlpe.cli.evaluate import main

    (tmp_path / "ref.txt").write_text("a b c\n")
    assert main(["bleu", "--hyp", str(tmp_path / "nope.txt"), "--ref", str(tmp_path / "ref.txt")]) == 2
    assert "nope.txt: no such file" in one_error_line(capsys, "xlpe-evaluate")
    (tmp_path / "hyp.txt").write_text("a b c\nd e\n")
    assert main(["bleu", "--hyp", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt")]) == 2
    line = one_error_line(capsys, "xlpe-evaluate")
    assert f"line counts differ: --hyp {tmp_path / 'hyp.txt'} has 2 lines, --ref {tmp_path / 'ref.txt'} has 1" in line
    assert main(["reordering", "--pred", str(tmp_path / "ref.txt")]) == 2
    assert "give --pred and --oracle" in one_error_line(capsys, "xlpe-evaluate")
    assert (
        main(
            [
                "perplexity",
                "--model",
                "runs/none/x",
                "--source",
                str(tmp_path / "ref.txt"),
                "--ref",
                str(tmp_path / "ref.txt"),
            ]
        )
        == 2
    )
    assert "no such local directory" in one_error_line(capsys, "xlpe-evaluate")


def test_push_and_train_user_errors(tmp_path, capsys):
    from xlpe.cli.push import main as push_main
    from xlpe.cli.train import cli

    assert push_main([str(tmp_path / "missing"), "user/repo", "--dry-run"]) == 2
    assert "no such local directory" in one_error_line(capsys, "xlpe-push")
    assert (
        cli(["--train-source-file", str(tmp_path / "train.en"), "--train_target_file", str(tmp_path / "train.de")]) == 2
    )
    assert "--train_source_file" in one_error_line(capsys, "xlpe-train")
    assert cli(["--model_name_or_path", "./runs/typo", "--output_dir", str(tmp_path)]) == 2
    assert "./runs/typo: no such local directory" in one_error_line(capsys, "xlpe-train")
    (tmp_path / "train.en").write_text("a b\nc d\n")
    (tmp_path / "train.de").write_text("x y\n")  # found after the arguments are parsed, while reading the data
    assert (
        cli(
            [
                "--train_source_file",
                str(tmp_path / "train.en"),
                "--train_target_file",
                str(tmp_path / "train.de"),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--output_dir",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    assert "train.de" in one_error_line(capsys, "xlpe-train")


def test_a_user_error_prints_no_traceback(tmp_path):
    result, _ = run_script("xlpe.cli.translate:main", "--model", str(tmp_path / "nope"), "--input", "-")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"xlpe-translate: error: --model {tmp_path / 'nope'}: no such local directory"
    ]
