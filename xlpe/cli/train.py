"""`xlpe-train`: the console script (the run itself is `xlpe.training.run.main`). A user error found before
any work prints one line and exits 2; Ctrl-C prints one line (the step reached, the newest checkpoint and how to
resume from it) and exits 130; a finished multi-process run tears its process group down cleanly.

`--help` is answered without importing torch: the help text (hundreds of options, most of them transformers'
`Seq2SeqTrainingArguments`, which import torch) ships with the package (`train_help.txt`, served while its key,
the Python and transformers versions and the argument sources, matches); otherwise it is produced by the real
argument parser once and kept in `$XDG_CACHE_HOME/xlpe/help/` (default `~/.cache/xlpe/help/`), keyed by the
versions of Python, xlpe and transformers, the source of `xlpe/training/`, and the terminal width: a changed
parser never shows a stale text. The same text gives the option names that a mistyped flag is checked against
before torch is imported ("did you mean").
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
from ..models.registry import help_signature  # (light: the registry imports no model module)
from . import CommandLineError, check_input_file, check_model_path, unknown_flags_message, user_error

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


SNAPSHOT = Path(__file__).with_name("train_help.txt")  # the help text as shipped (`write_help_snapshot`)
SNAPSHOT_COLUMNS = 100  # the width the shipped text is wrapped at
# the files whose code shapes the help text (the argument dataclasses and the recipe names they list)
HELP_SOURCES = ("arguments.py", "recipes.py", "errors.py")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "?"


def _help_cache_file() -> Path:
    digest = hashlib.sha256()
    training = Path(__file__).resolve().parents[1] / "training"
    for source in sorted(training.glob("*.py")) + [Path(__file__).resolve()]:
        digest.update(source.name.encode() + source.read_bytes())
    versions = [_version("xlpe"), _version("transformers")]
    width = shutil.get_terminal_size().columns
    digest.update(f"{sys.version_info[:2]}|{versions}|{width}|{help_signature()}".encode())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlpe" / "help"
    return root / f"xlpe-train-{digest.hexdigest()[:20]}.txt"


def snapshot_key() -> str:
    """What the shipped help text must have been made from to be served: Python's minor version (argparse's
    layout), the transformers release (its training arguments), the sources in `HELP_SOURCES` and the registered
    families' flags (`registry.help_signature`: a family or strategy added in a plugin shows in the help)."""
    digest = hashlib.sha256()
    training = Path(__file__).resolve().parents[1] / "training"
    for name in HELP_SOURCES:
        digest.update(name.encode() + (training / name).read_bytes())
    digest.update(help_signature().encode())
    python = ".".join(map(str, sys.version_info[:2]))
    return f"python {python}, transformers {_version('transformers')}, sources {digest.hexdigest()[:16]}"


def _snapshot_text() -> str | None:
    """The shipped help text when it was made from the code and releases in use (`snapshot_key`), else None."""
    with contextlib.suppress(OSError):
        key, _, text = SNAPSHOT.read_text(encoding="utf-8").partition("\n")
        if key == f"# {snapshot_key()}":
            return text
    return None


def _build_help_text() -> str:
    from ..training.arguments import parse_arguments

    buffer, program = io.StringIO(), sys.argv[0]
    sys.argv[0] = PROG  # argparse's prog
    try:
        with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
            parse_arguments(["--help"])
    finally:
        sys.argv[0] = program
    return buffer.getvalue()


def help_text() -> str:
    """The text of `xlpe-train --help`: from the cache, else the shipped snapshot (a fresh install answers at
    once), else (once) from the real argument parser, then cached."""
    cache = _help_cache_file()
    with contextlib.suppress(OSError):
        return cache.read_text(encoding="utf-8")
    text = _snapshot_text()
    if text is not None:
        return text
    text = _build_help_text()
    with contextlib.suppress(OSError):  # an unwritable cache only costs speed
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, cache)
    return text


def write_help_snapshot(path: Path = SNAPSHOT) -> Path:
    """Write the shipped help text (wrapped at `SNAPSHOT_COLUMNS`) with its `snapshot_key`; run after changing
    the training arguments: `python -c "from xlpe.cli.train import write_help_snapshot; write_help_snapshot()"`
    (`tests/cli/test_first_hour_cli.py` fails while the snapshot is stale)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(SNAPSHOT_COLUMNS)
    try:
        text = _build_help_text()
    finally:
        if saved is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = saved
    path.write_text(f"# {snapshot_key()}\n{text}", encoding="utf-8")
    return path


def known_options(text: str) -> set[str]:
    """The long options a help text lists (the option lines of its sections, every spelling)."""
    options = set()
    for line in text.splitlines():
        if line.startswith("  -"):
            for item in line.strip().split(", "):
                if item.startswith("--"):
                    options.add(item.split()[0])
    return options


def check_flags(argv: list[str], options: set[str]) -> None:
    """CommandLineError naming an unknown long flag with the closest known one; a unique prefix of a known
    option is left to argparse (which accepts it)."""
    unknown = []
    for item in argv:
        if not item.startswith("--") or item == "--":
            continue
        name = item.split("=", 1)[0]
        spellings = {name, "--" + name[2:].replace("-", "_")}
        if spellings & options or any(option.startswith(spelling) for option in options for spelling in spellings):
            continue
        unknown.append(name)
    if unknown:
        raise CommandLineError(unknown_flags_message(unknown, options))


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
    given = _given_values(argv)
    for name, value in given.items():
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
    if given.get("output_dir"):
        check_output_dir(given)


def check_output_dir(given: dict[str, str]) -> None:
    """The write rule (`xlpe.features.outputs`) for `--output_dir`, before torch is imported: never an input (a
    data file, --prepared_dataset, the model, tokenizer, config or reorderer it starts from, a local dataset), nor
    a directory holding another command's artefact (an export, a prepared dataset, a reorderer), even with
    --overwrite_output_dir; a file or an unwritable place is refused. Reuse of a run's own directory is
    `xlpe.training.reuse`'s."""
    from ..features.outputs import check_destination

    inputs = {
        f"--{name}": value
        for name, value in given.items()
        if name in (*MODEL_OPTIONS, "prepared_dataset", "dataset_name") or name.endswith(FILE_SUFFIX)
    }
    try:
        check_destination(
            given["output_dir"],
            "--output_dir",
            inputs,
            overwrite=True,
            kind="dir",
            owns=("training-run", "model"),
            exists_ok=True,
            refuse_other=False,
            create_parents=True,
        )
    except ValueError as error:
        raise CommandLineError(str(error)) from None


def cli(argv: list[str] | None = None, callbacks: list | None = None) -> int:
    """The `xlpe-train` command: `main` returns its metrics (for Python callers); a command exits 0 on success, 2
    on a user error and 130 on Ctrl-C (one line: the step reached and the newest checkpoint to resume from).
    `callbacks`: more `TrainerCallback`s for the run (tests)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(help_text())
        return 0
    try:
        if not (len(argv) == 1 and argv[0].endswith(".json")):
            check_flags(argv, known_options(help_text()))
        check_paths(argv)
    except CommandLineError as error:
        return user_error(PROG, error)
    from ..training.arguments import UsageError
    from ..training.interrupts import INTERRUPTED_STATUS, InterruptWatch, interrupted_line
    from ..training.run import main

    watch = InterruptWatch()  # first: it has seen the step when a later callback is interrupted
    try:
        main(argv, callbacks=[watch, *(callbacks or [])])
    except UsageError as error:  # a user error found before any work: one line, no traceback
        return user_error(PROG, error)
    except KeyboardInterrupt:  # Ctrl-C: where the run stopped and what it saved, in one line
        output_dir = _output_dir(argv)
        print(
            interrupted_line(
                PROG,
                watch,
                output_dir,
                resume="resume with --resume_from_checkpoint last",
                nothing_saved=f"no checkpoint saved in {watch.output_dir or output_dir} (rerun to start over)",
            ),
            file=sys.stderr,
        )
        return INTERRUPTED_STATUS
    finish_distributed()
    return 0


def _output_dir(argv: list[str]) -> str | None:
    """--output_dir as given (for the Ctrl-C line of a run interrupted before training began)."""
    try:
        return _given_values(argv).get("output_dir")
    except CommandLineError:
        return None


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
