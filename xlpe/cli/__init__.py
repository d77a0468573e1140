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
* **One error discipline** (`console_script`, the decorator every entry point goes through; docs/command_line.md,
  "Errors and exit codes"). A condition the user caused or can fix (a missing or damaged input file, a model path
  that does not exist, a bad flag value or combination, a device this machine lacks, a full disk) prints one line
  `PROG: error: ...` naming the flag or file and what to do, exit status 2 (`user_error`, `check_input_file`,
  `check_model_path`, `check_device`). Ctrl-C or SIGTERM: one line, exit status 130. Anything else is a bug: one
  line saying so and naming the file its traceback was written to, exit status 1.
* **What a command may write** (`xlpe.features.outputs.check_destination`, called by every command for each
  output before any work): never one of its inputs, or a folder holding or inside one (even with
  `--overwrite_output`); over an existing directory only when it holds the command's own earlier output; never a
  directory where a file goes, a missing or unwritable place. Final outputs are written atomically
  (`xlpe.features.text_files.write_text_atomic`: a full disk is one line, no partial file), and
  `xlpe-translate --output` is locked while it is made (`output_file_lock`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..training.errors import UsageError, suggest_option, unknown_flags_message  # (standard library only)

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


def read_json_input(path: str, flag: str):
    """The JSON value of input file `path`; CommandLineError naming `flag`, the file and the line when it is not
    UTF-8 JSON (a bare JSONDecodeError names neither)."""
    import json

    check_input_file(path, flag)
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise CommandLineError(f"{flag} {path}: not UTF-8 text (byte offset {error.start})") from None
    except json.JSONDecodeError as error:
        raise CommandLineError(f"{flag} {path}:{error.lineno}: not valid JSON ({error.msg})") from None


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


def hub_load_failure(value: str, flag: str, error: BaseException) -> CommandLineError:
    """The one line for `value` that is no local path and that `from_pretrained` could not get from the Hub either:
    says both, with the closest local directory when there is one (a mistyped folder name without a slash looks
    like a Hub id), and the first line of the loader's own message."""
    if Path(value).expanduser().exists():
        return CommandLineError(f"{flag} {value}: {_first_line(error)}")
    return CommandLineError(
        f"{flag} {value}: no such local directory{did_you_mean_directory(value)}, and the Hub did not serve it "
        f"({_first_line(error)})"
    )


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


def check_model_path(value: str, flag: str, expected: str = "a model directory") -> None:
    """CommandLineError when `value` is neither a local directory nor something the Hub could serve: a
    missing local path is reported as missing locally (not as a failed connection to huggingface.co), with the
    closest directory beside it when there is one (`did_you_mean_directory`). Every command checks its model and
    tokenizer paths with it (`expected` names what a file there should have been)."""
    path = Path(value).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise CommandLineError(f"{flag} {value}: is a file, expected {expected} or a Hub id")
    if looks_like_local_path(value):
        raise CommandLineError(f"{flag} {value}: no such local directory{did_you_mean_directory(value)}")
    if hub_is_offline():
        raise CommandLineError(
            f"{flag} {value}: no such local directory, and the Hub is not tried "
            "(HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set)"
        )


def check_device(value: str | None, flag: str = "--device") -> str:
    """`value` (None: cuda when available, else cpu) when this machine has that device; else CommandLineError naming
    `flag`, what is wrong and the devices that are here (`--device bogus`, `--device cuda` on a CPU-only build of
    torch or a machine without a GPU, `--device cuda:3` with two GPUs)."""
    import torch

    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    here = ", ".join(["cpu", *(["cuda"] + [f"cuda:{i}" for i in range(count)] if cuda else [])])
    if torch.backends.mps.is_available():
        here += ", mps"
    if value is None:
        return "cuda" if cuda else "cpu"
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        raise CommandLineError(f"{flag} {value}: not a device name (this machine has: {here})") from None
    if device.type == "cuda":
        if not cuda:
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise CommandLineError(f"{flag} {value}: {why}; use {flag} cpu (this machine has: {here})")
        if device.index is not None and device.index >= count:
            raise CommandLineError(f"{flag} {value}: there are {count} CUDA devices here ({here})")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise CommandLineError(f"{flag} {value}: MPS is not available here (this machine has: {here})")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise CommandLineError(f"{flag} {value}: not supported by this command (this machine has: {here})")
    return value


# ---------------------------------------------------------------------------------------------------------
# The entry point of every console script: one error discipline
# ---------------------------------------------------------------------------------------------------------

USER_ERROR_STATUS = 2  # argparse's status for a usage error
BUG_STATUS = 1
INTERRUPTED_STATUS = 130  # 128 + SIGINT, for Ctrl-C and SIGTERM alike (= xlpe.training.interrupts.INTERRUPTED_STATUS)
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# OSErrors about a path the user named: a missing or unreadable file, a directory where a file was expected
PATH_ERRORS = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EROFS})
TRACEBACK_DIR_VARIABLE = "XLPE_TRACEBACK_DIR"  # where a bug's traceback is written (default: the temp directory)
RAISE_VARIABLE = "XLPE_RAISE_ERRORS"  # "1": let a bug's exception propagate (debugging, pdb)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while a console script runs: handled as Ctrl-C (one line, exit 130)."""


def _user_error_types() -> tuple[type, ...]:
    """The exception types that are user errors by construction: raised by this package where it found a bad input
    (imported when an exception is being classified, so that `--help` stays fast)."""
    from ..features.artefacts import ArtefactMismatch, DirectoryInUse
    from ..features.outputs import OutputRefused
    from ..features.text_files import OutputExistsError, OutputWriteError, TextFileError

    return (
        CommandLineError,
        UsageError,
        TextFileError,
        OutputRefused,
        OutputExistsError,
        OutputWriteError,
        ArtefactMismatch,
        DirectoryInUse,
    )


def os_error_line(error: OSError) -> str | None:
    """One line for an OSError the user can fix (`DISK_FULL`, `PATH_ERRORS`), naming the path; None for others."""
    path = f"{error.filename}: " if error.filename else ""
    if error.errno in DISK_FULL:
        return f"{path}{error.strerror or 'no space left'} (free some space, or write to another place)"
    if error.errno in PATH_ERRORS and error.filename:
        return f"{path}{error.strerror}"
    return None


def write_traceback(prog: str, error: BaseException, argv=None) -> Path | None:
    """Write the command line, versions and the traceback of `error` to a new file in `$XLPE_TRACEBACK_DIR` (default:
    the temporary directory); its path, or None when it could not be written."""
    import platform
    import tempfile
    import traceback

    folder = Path(os.environ.get(TRACEBACK_DIR_VARIABLE) or tempfile.gettempdir())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        from importlib.metadata import version

        installed = version("xlpe")
    except Exception:  # noqa: BLE001 (not installed: run from a checkout)
        installed = "not installed (a checkout)"
    command = " ".join([prog, *map(str, sys.argv[1:] if argv is None else argv)])
    versions = f"xlpe {installed}, Python {platform.python_version()}, {platform.platform()}"
    text = f"{command}\n{versions}\n\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{prog.split()[0]}-{stamp}-{os.getpid()}.traceback.txt"
        path.write_text(text, encoding="utf-8")
    except OSError:
        return None
    return path


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While the block runs in the main thread, SIGTERM raises `Terminated` (as Ctrl-C raises KeyboardInterrupt),
    unless a handler is installed already. A forked child (a data-loader worker) gets the default action back."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def report_exception(prog: str, error: BaseException, argv=None) -> int:
    """Print the one line for `error` escaping command `prog` and return its exit status: 130 for Ctrl-C or SIGTERM;
    2 for a user error (`_user_error_types`, an OSError of `os_error_line`); 1 for anything else, a bug, whose
    traceback is written to a file that the line names (`write_traceback`)."""
    if isinstance(error, KeyboardInterrupt):
        with contextlib.suppress(Exception):
            from ..training.interrupts import close_progress_bars

            close_progress_bars()
        signal_name = "SIGTERM" if isinstance(error, Terminated) else "Ctrl-C"
        print(f"{prog}: interrupted ({signal_name}); the command stopped before it finished", file=sys.stderr)
        return INTERRUPTED_STATUS
    if isinstance(error, _user_error_types()):
        return user_error(prog, error)
    if isinstance(error, OSError) and os_error_line(error) is not None:
        return user_error(prog, os_error_line(error))
    from ..features.text_files import is_disk_full

    if is_disk_full(error):  # (the tokenizers library's plain Exception for one)
        return user_error(prog, f"{_first_line(error)} (free some space, or write to another place)")
    path = write_traceback(prog, error, argv)
    where = f"its traceback is in {path}" if path else "its traceback could not be written to a file"
    print(
        f"{prog}: error: an internal error (a bug in xlpe, not in your input): {type(error).__name__}: "
        f"{_first_line(error)[:300]}; {where} (please report it)",
        file=sys.stderr,
    )
    if path is None:
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__)
    return BUG_STATUS


def console_script(prog: str):
    """Decorator of a console script's entry point `main(argv=None, ...) -> int`: whatever escapes it is reported by
    `report_exception` (one line; exit status 2, 130 or 1), SIGTERM is handled as Ctrl-C while it runs, and
    SystemExit (argparse's own errors and --help) passes through. `XLPE_RAISE_ERRORS=1` lets a bug propagate."""

    def decorate(main):
        @functools.wraps(main)
        def entry(*args, **kwargs) -> int:
            try:
                with _sigterm_as_interrupt():
                    return main(*args, **kwargs)
            except SystemExit:
                raise
            except BaseException as error:  # noqa: BLE001 (classified: user error, interrupt or bug)
                if not isinstance(error, Exception | KeyboardInterrupt):
                    raise  # GeneratorExit and the like
                argv = args[0] if args and isinstance(args[0], list | tuple) else kwargs.get("argv")
                status = report_exception(prog, error, argv)
                if status == BUG_STATUS and os.environ.get(RAISE_VARIABLE) == "1":
                    raise
                return status

        entry.console_script = prog  # (tests: every console script of setup.cfg goes through here)
        return entry

    return decorate


__all__ = [
    "BUG_STATUS",
    "INTERRUPTED_STATUS",
    "USER_ERROR_STATUS",
    "CommandLineError",
    "Terminated",
    "check_device",
    "console_script",
    "os_error_line",
    "report_exception",
    "write_traceback",
    "canonical_flags",
    "check_input_file",
    "check_model_path",
    "did_you_mean_directory",
    "hub_is_offline",
    "hub_load_failure",
    "looks_like_local_path",
    "read_json_input",
    "suggest_option",
    "unknown_flags_message",
    "user_error",
]
