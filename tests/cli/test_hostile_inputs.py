"""What hostile use found (besides the model folder's lock, tests/cli/test_model_folder_writes.py): a flag and a
--config_overrides key setting one field differently, a position limit below the length flags, a truncated
tokenizer.json, a mistyped local model path. Each is one line, exit status 2, before any work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TRAINING_TESTS = str(Path(__file__).resolve().parents[1] / "training")
if TRAINING_TESTS not in sys.path:
    sys.path.insert(0, TRAINING_TESTS)


def one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# A flag and --config_overrides that set one field to different values
# ---------------------------------------------------------------------------------------------------------


def test_a_flag_and_a_config_override_of_the_same_field_must_agree(tmp_path, capsys):
    from xlpe.cli.train import cli
    from xlpe.training.run_config import parse_arguments

    base = ["--output_dir", str(tmp_path / "run"), "--max_steps", "1"]
    assert cli([*base, "--xl_strategy", "head", "--config_overrides", "xl_strategy=combination"]) == 2
    line = one_error_line(capsys, "xlpe-train")
    assert "--xl_strategy head and --config_overrides xl_strategy=combination" in line, line
    assert not (tmp_path / "run").exists()
    assert cli([*base, "--d_model", "16", "--config_overrides", "d_model=32,dropout=0.0"]) == 2
    assert "--d_model 16 and --config_overrides d_model=32" in one_error_line(capsys, "xlpe-train")
    model_args, _, _ = parse_arguments([*base, "--xl_strategy", "head", "--config_overrides", "xl_strategy=head"])
    assert model_args.xl_strategy == "head"  # the same value twice is fine


# ---------------------------------------------------------------------------------------------------------
# A position limit below the data's lengths: refused before training
# ---------------------------------------------------------------------------------------------------------


def test_a_position_limit_below_the_length_flags_is_refused_before_training(tmp_path, capsys):
    from test_train import TINY

    from xlpe.cli.train import cli

    run = tmp_path / "run"
    argv = ["--output_dir", str(run), "--cache_dir", str(tmp_path / "cache"), *TINY, "--max_steps", "2"]
    lengths = ["--max_source_length", "64", "--max_target_length", "64"]
    assert cli([*argv, *lengths, "--do_train", "--config_overrides", "max_position_embeddings=8"]) == 2
    line = one_error_line(capsys, "xlpe-train")
    assert "--max_source_length 64 and --max_target_length 64 exceed the model's max_position_embeddings 8" in line
    assert "(--config_overrides)" in line, line
    assert not list(run.glob("checkpoint-*")) and not (run / "model.safetensors").exists()


def test_default_lengths_above_the_position_limit_are_lowered_to_it(tmp_path, capsys):
    """Not given, the length flags are lowered to the model's limit: pairs the model cannot take are skipped and
    counted (the preparation report), the rest trains."""
    import json

    from test_train import TINY

    from xlpe.cli.train import cli

    run = tmp_path / "run"
    argv = ["--output_dir", str(run), "--cache_dir", str(tmp_path / "cache"), *TINY, "--max_steps", "2"]
    assert cli([*argv, "--do_train", "--config_overrides", "max_position_embeddings=12"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    report = json.loads((run / "preparation_report.json").read_text())["train"]
    skipped = report["pairs_skipped"]
    assert skipped["source_too_long"] + skipped["target_too_long"] > 0 and report["pairs_kept"] > 0, report


def test_a_prepared_split_longer_than_the_position_limit_is_refused():
    from types import SimpleNamespace

    import datasets

    from xlpe.training.errors import UsageError
    from xlpe.training.run import check_prepared_fit
    from xlpe.training.run_config import RunConfig

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=5))
    model_args = RunConfig(SimpleNamespace(config_name=None, model_name_or_path="runs/m"), None, None)
    fits = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]], "labels": [[4, 5, 1]]})
    check_prepared_fit({"train": fits}, model, model_args, None)
    long = datasets.Dataset.from_dict({"input_ids": [[1, 2], [1, 2, 3, 4, 5, 6, 7]], "labels": [[1], [2]]})
    with pytest.raises(UsageError, match="the train split's longest source has 7 tokens, over the model's"):
        check_prepared_fit({"train": long}, model, model_args, None)


# ---------------------------------------------------------------------------------------------------------
# A truncated tokenizer.json is named, with its line
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def cut_model(toy_tokenizer, tmp_path):
    """A tiny model folder whose tokenizer.json was cut in half (a copy interrupted)."""
    from conftest import save_tiny_xlpe_model

    folder = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    (folder / "tokenizer.json").write_text(text[: len(text) // 2], encoding="utf-8")
    (tmp_path / "in.txt").write_text("the cat sees the dog\n")
    return folder


def test_a_truncated_tokenizer_json_is_named_by_every_loader(cut_model, tmp_path, capsys):
    from xlpe.cli.prepare import main as prepare
    from xlpe.cli.train import cli
    from xlpe.cli.translate import main as translate

    named = f"{cut_model / 'tokenizer.json'}:"
    assert translate(["--model", str(cut_model), "--input", str(tmp_path / "in.txt"), "--quiet"]) == 2
    line = one_error_line(capsys, "xlpe-translate")
    assert named in line and "not valid JSON" in line and "config.json" not in line, line
    argv = ["--output_dir", str(tmp_path / "run"), "--model_name_or_path", str(cut_model), "--max_steps", "1"]
    assert cli(argv) == 2
    line = one_error_line(capsys, "xlpe-train")
    assert named in line and "--model_name_or_path" in line, line
    source = tmp_path / "in.txt"
    argv = ["--source", str(source), "--target", str(source), "--tokenizer", str(cut_model)]
    with pytest.raises(SystemExit) as stop:  # (xlpe-prepare exits through argparse)
        prepare([*argv, "--output", str(tmp_path / "prepared")])
    assert stop.value.code == 2
    line = one_error_line(capsys, "xlpe-prepare")
    assert named in line and "--tokenizer" in line, line


def test_check_tokenizer_files_names_file_and_line(tmp_path):
    from xlpe.features.tokenization import check_tokenizer_files

    (tmp_path / "tokenizer_config.json").write_text('{\n  "a": 1,\n  "b": \n')
    with pytest.raises(ValueError, match=r"--tokenizer t: the tokenizer cannot be loaded: .*tokenizer_config.json:4:"):
        check_tokenizer_files(tmp_path, "--tokenizer t")
    check_tokenizer_files("Helsinki-NLP/opus-mt-de-en")  # a Hub id: left to the loader


# ---------------------------------------------------------------------------------------------------------
# A mistyped local model path: missing locally, with the closest directory beside it
# ---------------------------------------------------------------------------------------------------------


def test_a_mistyped_local_path_suggests_the_closest_directory(tmp_path, monkeypatch, capsys):
    from xlpe.cli import CommandLineError, check_model_path
    from xlpe.cli.push import main as push

    (tmp_path / "runs" / "de-en").mkdir(parents=True)
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for typo, meant in (("runs/de-enn", "runs/de-en"), ("./modle", "./model"), ("runs/de-en-x/", "runs/de-en")):
        with pytest.raises(CommandLineError) as raised:
            check_model_path(typo, "--model")
        message = str(raised.value)
        assert f"--model {typo}: no such local directory (did you mean {meant}?)" == message, message
    with pytest.raises(CommandLineError, match=r"runs/zzz: no such local directory$"):
        check_model_path("runs/zzz", "--model")  # nothing close: no suggestion
    check_model_path("Helsinki-NLP/opus-mt-de-en", "--model")  # a Hub id: left to the Hub
    assert push(["runs/de-enn", "me/m", "--dry_run"]) == 2
    assert "(did you mean runs/de-en?)" in one_error_line(capsys, "xlpe-push")


def test_an_unknown_tagger_is_one_line(tmp_path, capsys):
    from test_train import TINY

    from xlpe.cli.train import cli

    argv = ["--output_dir", str(tmp_path / "run"), "--cache_dir", str(tmp_path / "cache"), *TINY, "--max_steps", "1"]
    assert cli([*argv, "--do_train", "--model_type", "xlpe", "--source_tagger", "none"]) == 2
    line = one_error_line(capsys, "xlpe-train")
    assert "POS tagger: unknown tagger 'none': expected one of nltk-en" in line, line
