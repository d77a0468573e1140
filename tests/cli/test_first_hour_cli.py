"""Fast feedback: `xlpe-train --help` is the real parser's text, built once on a machine and then served from the
help cache without torch, and a mistyped flag gets "did you mean" from every command before torch is imported
(xlpe-train: once the help cache knows its options)."""

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
    if name == "xlpe-train":  # its parser (transformers' training arguments) imports torch: the cache is made once
        assert run_script(target, "--help", env=env, timeout=300)[0].returncode == 0
    fresh = True
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


def test_train_help_is_built_once_then_served_from_the_cache_without_torch(tmp_path):
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100"}
    result, _ = run_script(console_scripts()["xlpe-train"], "--help", env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.startswith("usage: xlpe-train")
    assert "--model_name_or_path" in result.stdout and list((tmp_path / "xlpe" / "help").glob("*.json"))
    code = (
        "import sys; from xlpe.cli.train import help_text; text = help_text()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nsys.stdout.write(text)"
    )
    import subprocess

    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == result.stdout  # the parser's own text, as cached


def test_a_stale_help_cache_is_never_served(tmp_path, monkeypatch):
    """A cache made from other sources or releases is not read: the parser builds the help again."""
    from xlpe.training import command_line

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = command_line.help_cache_file(command_line.help_key())
    path.parent.mkdir(parents=True)
    path.write_text('{"key": "python 0.0, transformers 0", "help": "stale", "options": []}\n', encoding="utf-8")
    assert command_line.cached_help() is None
    assert "--model_name_or_path" in train_cli.help_text()  # built by the parser instead, then cached
    assert command_line.cached_help()["help"] != "stale"
