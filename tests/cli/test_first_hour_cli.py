"""Fast feedback. `xlpe-train --help` is served from the shipped snapshot on a fresh install
(no cache, no torch), the snapshot matches what the real parser prints, and a mistyped flag gets "did you mean"
from every command, xlpe-train included, before torch is imported."""

from __future__ import annotations

import sys

import pytest
from test_help import ENV, console_scripts, run_script

from xlpe.cli import canonical_flags, suggest_option, unknown_flags_message
from xlpe.cli import train as train_cli


def test_suggestions_compare_dash_and_underscore_spellings():
    options = ["--source", "--source_lang", "--num_beams", "--output_dir"]
    assert suggest_option("--sorce", options) == "--source"
    assert suggest_option("--num-beam", options) == "--num_beams"
    assert suggest_option("--ouptut_dir=x", options) == "--output_dir"
    assert suggest_option("--zzz", options) is None
    assert (
        unknown_flags_message(["--sorce", "a"], options) == "unrecognized arguments: --sorce a (did you mean --source?)"
    )
    assert unknown_flags_message(["--sorce", "--num-beam"], options) == (
        "unrecognized arguments: --sorce --num-beam (did you mean --source for --sorce, --num_beams for --num-beam?)"
    )


def test_argparse_commands_suggest_including_subcommand_flags(capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="p")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("bleu").add_argument("--lowercase", action="store_true")
    canonical_flags(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["bleu", "--lowercse"])
    assert exit_.value.code == 2
    assert "p: error: unrecognized arguments: --lowercse (did you mean --lowercase?)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, args, meant",
    [
        ("xlpe-train", ["--output_dir", "x", "--sorce_lang", "en"], "--source_lang"),
        ("xlpe-train", ["--output-dir", "x", "--learning-rte", "1e-3"], "--learning_rate"),
        ("xlpe-prepare", ["--output", "x", "--sorce", "a"], "--source"),
        ("xlpe-translate", ["--model", "m", "--num_bems", "2"], "--num_beams"),
        ("xlpe-evaluate", ["bleu", "--hyp", "h", "--ref", "r", "--lowercse"], "--lowercase"),
        (
            "xlpe-reorder",
            ["train", "--source", "s", "--target", "t", "--output_dir", "o", "--lerning_rate", "1"],
            "--learning_rate",
        ),
        ("xlpe-tagger", ["train", "--conllu", "c", "--output", "o", "--colunm", "xpos"], "--column"),
        ("xlpe-push", [".", "u/r", "--dry_rn"], "--dry_run"),
        ("xlpe-demo", ["--step", "3", "--sed", "1"], "--seed"),
    ],
)
def test_a_mistyped_flag_gets_did_you_mean_fast_and_without_torch(name, args, meant, tmp_path):
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path)}  # a fresh machine: no help cache
    target = console_scripts()[name]
    module, function = target.split(":")
    # xlpe-train parses with the flag schema shipped beside its help; when that snapshot is stale (a record that
    # bench/check_records.py names, not a test failure) the schema is built once with torch, then cached
    fresh = name != "xlpe-train" or train_cli.read_schema(train_cli.FLAGS_SNAPSHOT, train_cli.snapshot_key())
    code = (
        f"import sys; sys.argv[0] = 'prog'; from {module} import {function}\n"
        f"try:\n    code = {function}()\nexcept SystemExit as e:\n    code = e.code\n"
        + ("assert 'torch' not in sys.modules, 'torch was imported'\n" if fresh else "")
        + "sys.exit(code)"
    )
    import subprocess
    import time

    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)
    seconds = time.perf_counter() - started
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "unrecognized arguments" in last and f"did you mean {meant}" in last, result.stderr
    assert "Traceback" not in result.stderr and (seconds < 5.0 or not fresh)  # < 2 s measured on a quiet machine


def test_train_help_on_a_fresh_install_comes_from_the_shipped_schema_when_it_is_current(tmp_path):
    """Formatted from the shipped flag schema when its key is current (bench/check_records.py checks that it is and
    that the text is the parser's: a stale snapshot is a record to refresh, not a failing test), else from a schema
    built once and cached; the same text either way."""
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100"}
    result, seconds = run_script(console_scripts()["xlpe-train"], "--help", env=env)
    assert result.returncode == 0 and result.stdout.startswith("usage: xlpe-train")
    assert "--model_name_or_path" in result.stdout
    if train_cli.read_schema(train_cli.FLAGS_SNAPSHOT, train_cli.snapshot_key()) is not None:
        assert seconds < 5.0 and not (tmp_path / "xlpe").exists()  # served from the snapshot: nothing cached
    again, seconds = run_script(console_scripts()["xlpe-train"], "--help", env=env)
    assert again.stdout == result.stdout and seconds < 5.0  # the snapshot or the cache


def test_a_stale_schema_is_never_served(tmp_path, monkeypatch):
    """A schema made from other sources or releases is not read."""
    stale = tmp_path / "train_flags.json"
    stale.write_text('{"version": 2, "key": "python 0.0, transformers 0, sources 0", "flags": []}\n', encoding="utf-8")
    assert train_cli.read_schema(stale, train_cli.snapshot_key()) is None
    monkeypatch.setattr(train_cli, "FLAGS_SNAPSHOT", stale)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "--model_name_or_path" in train_cli.help_text()  # built by the parser instead, then cached
    assert list((tmp_path / "xlpe" / "help").glob("*.flags.json"))


def test_a_registered_tagger_shows_in_the_help_without_staling_the_schema():
    """The registries are added when the schema is read: a tagger (or a family, a form) registered in code or a
    plugin is in `--help` at once, and the shipped schema stays current (no artefact to regenerate)."""
    from xlpe.models.taggers import WordTagger, register_tagger, unregister_tagger

    before = train_cli.snapshot_key()

    class Nothing(WordTagger):
        tags = ("X",)

        def tag_words(self, words):
            return ["X"] * len(words)

    register_tagger("nothing-xx", Nothing, languages=("xx",), description="a test tagger")
    try:
        assert train_cli.snapshot_key() == before
        assert "nothing-xx" in " ".join(train_cli.help_text().split())  # in --source_tagger's help
    finally:
        unregister_tagger("nothing-xx")
    assert "nothing-xx" not in train_cli.help_text()


def test_library_parser_suggests_too():
    from xlpe.training.errors import UsageError
    from xlpe.training.run_config import parse_arguments

    with pytest.raises(UsageError, match=r"unrecognized arguments: --warmup_stepz 3 \(did you mean --warmup_steps\?\)"):
        parse_arguments(["--output_dir", "x", "--warmup_stepz", "3"])


def test_reorder_train_help_shows_its_defaults():
    """`xlpe-reorder train`'s defaults are in its --help (its epochs once defaulted to 3, ~50 minutes on 10k pairs,
    without saying so; now `auto`: as many as fit its time budget)."""
    from xlpe.cli.reorder import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(subparsers.choices["train"].format_help().split())
    for shown in (
        "--epochs EPOCHS passes over the training pairs",
        "a resume keeps it) (default: auto)",
        "sentence pairs a step (default: 64)",
        "(default: 0.001)",
        "(default: 256)",
        "pieces of the trained tokenizer (default: 8000)",
    ):
        assert shown in text, shown


def test_reorder_train_reuses_the_prepared_alignments(tmp_path, monkeypatch, capsys):
    """`xlpe-reorder train --prepared DIR` trains on the oracle orders xlpe-prepare made from its alignments, with
    its tokenizer: eflomal does not run again; a wrong --tokenizer and --alignments beside it are refused."""
    import warnings

    from conftest import write_multi30k_slice

    from xlpe.cli import prepare, reorder
    from xlpe.features import prepare as features_prepare

    write_multi30k_slice(tmp_path)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            prepare.main(
                [
                    "--source",
                    "train.de",
                    "--target",
                    "train.en",
                    "--source_lang",
                    "de",
                    "--target_lang",
                    "en",
                    "--output",
                    "prepared",
                ]
            )
            == 0
        )

    def no_aligning(*args, **kwargs):
        raise AssertionError("eflomal ran again")

    monkeypatch.setattr(features_prepare, "align_with_eflomal_flat", no_aligning)
    tiny = [
        "--d_model",
        "16",
        "--token_layers",
        "1",
        "--word_layers",
        "1",
        "--batch_size",
        "16",
        "--epochs",
        "1",
        "--calibration_pairs",
        "0",
    ]
    capsys.readouterr()
    assert (
        reorder.main(
            ["train", "--prepared", "prepared", "--tokenizer", "prepared/tokenizer", "--output_dir", "r", *tiny]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "120 pairs of prepared's train split" in captured.err and "nothing is aligned again" in captured.err
    assert (tmp_path / "r" / "config.json").is_file()
    assert reorder.main(["train", "--prepared", "prepared", "--output_dir", "r", *tiny]) == 0  # same record: reused
    assert "already holds this reorderer" in capsys.readouterr().err
    for extra, message in (
        (["--source", "train.de", "--target", "train.en"], "give --source and --target (text), or --prepared"),
        (["--alignments", "a"], "--prepared brings its alignments"),
    ):
        with pytest.raises(SystemExit) as exit_:
            reorder.main(["train", "--prepared", "prepared", *extra, "--output_dir", "r2", *tiny])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
