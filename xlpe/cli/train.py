"""`xlpe-train`: the console script (the run itself is `xlpe.training.run.main`). A user error found before
any work prints one line and exits 2; a finished multi-process run tears its process group down cleanly.

`--help` is answered without importing torch when it can be: the help text (hundreds of options, most of them
transformers' `Seq2SeqTrainingArguments`, which import torch) is produced by the real argument parser once and
kept in `$XDG_CACHE_HOME/xlpe/help/` (default `~/.cache/xlpe/help/`), keyed by the versions of Python, xlpe and
transformers, the source of `xlpe/training/`, and the terminal width: a changed parser never shows a stale text.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import sys
from pathlib import Path

from ..features.language_codes import check_language_code
from . import CommandLineError, check_input_file, check_model_path, user_error

PROG = "xlpe-train"
# options whose value must name a model, tokenizer or config (a local directory or a Hub id) or an input file;
# checked before anything heavy is imported (dash spellings are normalised first)
MODEL_OPTIONS = ("model_name_or_path", "tokenizer_name", "config_name", "reorderer")
FILE_SUFFIX = "_file"
LANGUAGE_OPTIONS = ("source_lang", "target_lang")


def __getattr__(name: str):  # old `xlpe.train` names, imported only when asked for (they import torch)
    if name in ("UsageError", "parse_arguments"):
        from ..training import arguments

        return getattr(arguments, name)
    if name == "main":
        from ..training.run import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# --help without torch
# ---------------------------------------------------------------------------------------------------------


def _help_cache_file() -> Path:
    digest = hashlib.sha256()
    training = Path(__file__).resolve().parents[1] / "training"
    for source in sorted(training.glob("*.py")) + [Path(__file__).resolve()]:
        digest.update(source.name.encode() + source.read_bytes())
    versions = []
    for package in ("xlpe", "transformers"):
        try:
            versions.append(importlib.metadata.version(package))
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            versions.append("?")
    width = shutil.get_terminal_size().columns
    digest.update(f"{sys.version_info[:2]}|{versions}|{width}".encode())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlpe" / "help"
    return root / f"xlpe-train-{digest.hexdigest()[:20]}.txt"


def help_text() -> str:
    """The text of `xlpe-train --help`, from the cache or (once) from the real argument parser."""
    cache = _help_cache_file()
    with contextlib.suppress(OSError):
        return cache.read_text(encoding="utf-8")
    from ..training.arguments import parse_arguments

    buffer, program = io.StringIO(), sys.argv[0]
    sys.argv[0] = PROG  # argparse's prog
    try:
        with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
            parse_arguments(["--help"])
    finally:
        sys.argv[0] = program
    text = buffer.getvalue()
    with contextlib.suppress(OSError):  # an unwritable cache only costs speed
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, cache)
    return text


# ---------------------------------------------------------------------------------------------------------
# User errors found before any work
# ---------------------------------------------------------------------------------------------------------


def _given_values(argv: list[str]) -> dict[str, str]:
    """{option name (underscores): value} for `--name value` / `--name=value` in argv, or the keys of the
    one JSON file `xlpe-train args.json` reads."""
    if len(argv) == 1 and argv[0].endswith(".json"):
        check_input_file(argv[0], "arguments file")
        try:
            given = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        except ValueError as error:
            raise CommandLineError(f"arguments file {argv[0]}: not valid JSON ({error})") from error
        if not isinstance(given, dict):
            raise CommandLineError(f"arguments file {argv[0]}: must hold a JSON object of argument names and values")
        return {key: value for key, value in given.items() if isinstance(value, str)}
    values = {}
    for index, item in enumerate(argv):
        if not item.startswith("--"):
            continue
        name, equals, value = item[2:].partition("=")
        if not equals:
            following = argv[index + 1] if index + 1 < len(argv) else None
            if following is None or following.startswith("--"):
                continue
            value = following
        values[name.replace("-", "_")] = value
    return values


def check_paths(argv: list[str]) -> None:
    """CommandLineError for a missing input file, a model/tokenizer/config path that does not exist locally
    (and cannot be a Hub id), or a language that is not a code, before torch is imported."""
    for name, value in _given_values(argv).items():
        if name in MODEL_OPTIONS and value and not value.startswith(("builtin:",)):
            check_model_path(value, f"--{name}")
        elif name.endswith(FILE_SUFFIX) and value:
            check_input_file(value, f"--{name}")
        elif name == "prepared_dataset" and value and not Path(value).is_dir():
            raise CommandLineError(f"--prepared_dataset {value}: no such local directory (an xlpe-prepare output)")
        elif name in LANGUAGE_OPTIONS:
            try:
                check_language_code(value, f"--{name}")
            except ValueError as error:
                raise CommandLineError(str(error)) from None


def cli(argv: list[str] | None = None) -> int:
    """The `xlpe-train` command: `main` returns its metrics (for Python callers); a command exits 0 on success."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(help_text())
        return 0
    try:
        check_paths(argv)
    except CommandLineError as error:
        return user_error(PROG, error)
    from ..training.arguments import UsageError
    from ..training.run import main

    try:
        main(argv)
    except UsageError as error:  # a user error found before any work: one line, no traceback
        return user_error(PROG, error)
    finish_distributed()
    return 0


def finish_distributed() -> None:
    """Join the ranks and destroy the process group before the interpreter exits. Left to static destructors,
    gloo's worker threads can abort a rank *after* a successful run ("terminate called without an active
    exception", SIGABRT), and `accelerate launch` then reports the whole job as failed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(cli())
