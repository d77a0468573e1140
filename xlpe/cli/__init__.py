"""The console scripts, one module each (argument parsing and error reporting; the work happens in the
library): xlpe-prepare, xlpe-train, xlpe-translate, xlpe-evaluate, xlpe-push, xlpe-demo, xlpe-reorder,
xlpe-tagger, xlpe-export.

Conventions shared by every command (docs/command_line.md), and the helpers that keep them:

* **Fast `--help`.** A CLI module imports only the standard library at module level; torch, transformers,
  datasets, sacrebleu and the library modules that need them are imported inside the functions that run the
  command (`tests/cli/test_help.py` checks both the time and the imports).
* **One flag spelling.** Long options are spelled with underscores (`--output_dir`, run_translation's
  convention, which `xlpe-train` inherits from `HfArgumentParser`); the dash spelling (`--output-dir`) is
  accepted everywhere as an alias (`canonical_flags`). Help shows the underscore spelling.
* **A mistyped flag gets a suggestion**: `unrecognized arguments: --sorce (did you mean --source?)`
  (`suggest_option`; installed on every parser by `canonical_flags`, and used by `xlpe-train` before torch).
* **User errors** (a missing input file, a model path that does not exist, a bad option combination) print
  one line `PROG: error: ...` on stderr and exit with status 2, without a traceback (`user_error`,
  `check_input_file`, `check_model_path`).
* **What a command may write** (`xlpe.features.outputs.check_destination`, called by every command for each
  output before any work): never one of its inputs, or a folder holding or inside one (even with
  `--overwrite_output`); over an existing directory only when it holds the command's own earlier output; never a
  directory where a file goes, a missing or unwritable place. Final outputs are written atomically
  (`xlpe.features.text_files.write_text_atomic`: a full disk is one line, no partial file), and
  `xlpe-translate --output` is locked while it is made (`output_file_lock`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..training.errors import suggest_option, unknown_flags_message  # (standard library only)

# ---------------------------------------------------------------------------------------------------------
# One flag spelling: --under_score, with --dash-spelling accepted as an alias
# ---------------------------------------------------------------------------------------------------------


def _canonical(option: str) -> str:
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def _alias(option: str) -> str:
    return "--" + option[2:].replace("_", "-") if option.startswith("--") else option


def canonical_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Spell every long option of `parser` (and of its subcommands) with underscores, and accept the dash
    spelling as an alias: `--output-dir` and `--output_dir` are the same option, help shows `--output_dir`.
    Raises ValueError when two different options would collide. Returns `parser`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in set(action.choices.values()):
                canonical_flags(subparser)
            continue
        if not action.option_strings:
            continue
        shown = list(dict.fromkeys(_canonical(option) for option in action.option_strings))
        for option in shown + [_alias(option) for option in shown]:
            owner = parser._option_string_actions.get(option)
            if owner is not None and owner is not action:
                raise ValueError(f"{parser.prog}: {option} would name two options ({owner.dest} and {action.dest})")
            parser._option_string_actions[option] = action
        action.option_strings = shown
    _suggest_on_unknown_flags(parser)
    return parser


# ---------------------------------------------------------------------------------------------------------
# A mistyped flag: "did you mean"
# ---------------------------------------------------------------------------------------------------------


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    options = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in set(action.choices.values()):
                options += _all_options(subparser)
    return options


def _suggest_on_unknown_flags(parser: argparse.ArgumentParser) -> None:
    """Make `parser.error` add "did you mean" to argparse's "unrecognized arguments" (subcommands' flags
    included: argparse reports their unknown flags through the top parser)."""
    plain_error = parser.error

    def error(message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            message = unknown_flags_message(message[len(prefix) :].split(), _all_options(parser))
        plain_error(message)

    parser.error = error


# ---------------------------------------------------------------------------------------------------------
# User errors: one line, exit status 2
# ---------------------------------------------------------------------------------------------------------


class CommandLineError(ValueError):
    """A user error found by a command (bad file, bad path, bad combination): one line, exit status 2."""


def user_error(prog: str, message: object) -> int:
    """Print `PROG: error: MESSAGE` (first line of it) on stderr and return the exit status 2."""
    text = str(message).strip().splitlines()
    print(f"{prog}: error: {text[0] if text else type(message).__name__}", file=sys.stderr)
    return 2


def check_input_file(path: str | None, flag: str) -> None:
    """CommandLineError unless `path` is '-' (stdin), None, or a readable file."""
    if path is None or path == "-":
        return
    if Path(path).is_dir():
        raise CommandLineError(f"{flag} {path}: is a directory, expected a text file")
    if not Path(path).is_file():
        raise CommandLineError(f"{flag} {path}: no such file")


def hub_is_offline() -> bool:
    """True when the Hugging Face libraries are told not to use the network (HF_HUB_OFFLINE /
    TRANSFORMERS_OFFLINE)."""
    return any(
        os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def looks_like_local_path(value: str) -> bool:
    """Whether `value` names a local path rather than a Hub id (`name` or `owner/name`): it starts with
    '/', '.', '~' or a drive letter, has a backslash or more than one '/', ends with '/', or its first part
    is an existing local directory (`runs/demo` when ./runs exists)."""
    if value.startswith(("/", ".", "~")) or "\\" in value or value.endswith("/") or value.count("/") > 1:
        return True
    if len(value) > 1 and value[1] == ":":
        return True
    head = value.split("/", 1)[0]
    return "/" in value and Path(head).is_dir()


def did_you_mean_directory(value: str) -> str:
    """ " (did you mean runs/de-en?)" when the parent of the missing path `value` exists and holds a directory of a
    close name (difflib), spelled as the user spelled the parent; else ""."""
    import difflib

    text = value.rstrip("/\\") or value
    path = Path(text).expanduser()
    parent = path.parent
    try:
        candidates = [entry.name for entry in parent.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, candidates, n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {text[: len(text) - len(path.name)]}{close[0]}?)"


def check_model_path(value: str, flag: str) -> None:
    """CommandLineError when `value` is neither a local directory nor something the Hub could serve: a
    missing local path is reported as missing locally (not as a failed connection to huggingface.co), with the
    closest directory beside it when there is one (`did_you_mean_directory`)."""
    path = Path(value).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise CommandLineError(f"{flag} {value}: is a file, expected a model directory or a Hub id")
    if looks_like_local_path(value):
        raise CommandLineError(f"{flag} {value}: no such local directory{did_you_mean_directory(value)}")
    if hub_is_offline():
        raise CommandLineError(
            f"{flag} {value}: no such local directory, and the Hub is not tried "
            "(HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set)"
        )


__all__ = [
    "CommandLineError",
    "canonical_flags",
    "check_input_file",
    "check_model_path",
    "did_you_mean_directory",
    "hub_is_offline",
    "looks_like_local_path",
    "suggest_option",
    "unknown_flags_message",
    "user_error",
]
