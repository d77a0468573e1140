"""`xlpe-train`: the console script (the run itself is `xlpe.training.run.main`). A user error found before
any work prints one line and exits 2; Ctrl-C prints one line (the step reached, the newest checkpoint and how to
resume from it) and exits 130; a finished multi-process run tears its process group down cleanly.

The command line is parsed once, here, before torch is imported (`xlpe.training.command_line`), and `--help` is
answered without torch, both from the parser's *flag schema* (hundreds of options, most of them transformers'
`Seq2SeqTrainingArguments`, which import torch): it ships with the package (`train_flags.json`, served while its key
— the Python and transformers versions and the argument sources — matches); otherwise the real parser makes it
once and it is kept in `$XDG_CACHE_HOME/xlpe/help/` (default `~/.cache/xlpe/help/`). The schema holds the argument
dataclasses only; the registries' flags and names (families, XL position forms, taggers, in code or in a plugin)
are added when it is read, so they never make it stale. A mistyped flag gets "did you mean" at once, the paths
and languages given are checked, and the run gets the flags as parsed (`xlpe.training.run.main(given=...)`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import sys
from pathlib import Path

from ..features.language_codes import check_language_code
from ..training.command_line import GivenFlags, help_parser, read_given, read_schema, schema_json, with_registries
from ..training.errors import UsageError
from . import CommandLineError, check_input_file, check_model_path, console_script, user_error

PROG = "xlpe-train"
# options whose value must name a model, tokenizer or config (a local directory or a Hub id) or an input file;
# checked before anything heavy is imported (dash spellings are normalised first)
MODEL_OPTIONS = ("model_name_or_path", "tokenizer_name", "config_name", "reorderer")
FILE_SUFFIX = "_file"
LANGUAGE_OPTIONS = ("source_lang", "target_lang")


def __getattr__(name: str):  # old `xlpe.train` names, imported only when asked for (they import torch)
    if name == "parse_arguments":
        from ..training import run_config

        return run_config.parse_arguments
    if name == "main":
        from ..training.run import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------
# --help without torch
# ---------------------------------------------------------------------------------------------------------


FLAGS_SNAPSHOT = Path(__file__).with_name("train_flags.json")  # the parser's flag schema as shipped
# the files whose code shapes the flag schema (the argument dataclasses, the flags' facts and the recipes that set
# them, the parser and the schema's form)
HELP_SOURCES = ("arguments.py", "recipes.py", "errors.py", "flag_facts.py", "run_config.py", "command_line.py")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "?"


def snapshot_key() -> str:
    """What the shipped flag schema must have been made from to be served: Python's minor version (argparse's
    layout), the transformers release (its training arguments) and the sources in `HELP_SOURCES`. The registries
    are not part of it: their flags and names are added when the schema is read (`command_line.with_registries`)."""
    digest = hashlib.sha256()
    training = Path(__file__).resolve().parents[1] / "training"
    for name in HELP_SOURCES:
        digest.update(name.encode() + (training / name).read_bytes())
    python = ".".join(map(str, sys.version_info[:2]))
    return f"python {python}, transformers {_version('transformers')}, sources {digest.hexdigest()[:16]}"


def _schema_cache_file(key: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlpe" / "help"
    return root / f"xlpe-train-{hashlib.sha256(key.encode()).hexdigest()[:20]}.flags.json"


def flag_schema() -> dict:
    """The flag schema of `xlpe-train`'s parser without the registries' flags (`command_line.schema_of`), without
    torch when it can be: the shipped snapshot when its key is current, else the cache, else (once) from the real
    parser, then cached."""
    key = snapshot_key()
    cache = _schema_cache_file(key)
    for path in (FLAGS_SNAPSHOT, cache):
        schema = read_schema(path, key)
        if schema is not None:
            return schema
    from ..training.run_config import flag_schema as parser_schema

    schema = parser_schema()
    with contextlib.suppress(OSError):  # an unwritable cache only costs speed
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(schema_json(schema, key), encoding="utf-8")
        os.replace(partial, cache)
    return schema


def help_text() -> str:
    """The text of `xlpe-train --help`, formatted from the flag schema with the registries' flags (the real
    parser's text, at the terminal's width: `bench/check_records.py` compares them)."""
    return help_parser(with_registries(flag_schema()), PROG).format_help()


def write_help_snapshot(path: Path | None = None) -> Path:
    """Write the shipped flag schema (`FLAGS_SNAPSHOT`, or `path`) with its `snapshot_key`; run after changing the
    training arguments: `python -c "from xlpe.cli.train import write_help_snapshot; write_help_snapshot()"`
    (`bench/check_records.py` names a stale one; a registered family, form or tagger never makes it stale)."""
    from ..training.run_config import flag_schema as parser_schema

    path = FLAGS_SNAPSHOT if path is None else path
    path.write_text(schema_json(parser_schema(), snapshot_key()), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------
# User errors found before any work
# ---------------------------------------------------------------------------------------------------------


def check_paths(values: dict) -> None:
    """CommandLineError for a missing input file, a model/tokenizer/config path that does not exist locally
    (and cannot be a Hub id), or a language that is not a code, before torch is imported (`values`: the flags
    given, `GivenFlags.values`)."""
    given = {name: value for name, value in values.items() if isinstance(value, str)}
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


@console_script(PROG)
def cli(argv: list[str] | None = None, callbacks: list | None = None) -> int:
    """The `xlpe-train` command: `main` returns its metrics (for Python callers); a command exits 0 on success, 2
    on a user error and 130 on Ctrl-C (one line: the step reached and the newest checkpoint to resume from).
    `callbacks`: more `TrainerCallback`s for the run (tests)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(help_text())
        return 0
    try:
        given = read_given(argv, with_registries(flag_schema()))  # the one parse of the command line (or JSON file)
        check_paths(given.values)
    except (CommandLineError, UsageError) as error:
        return user_error(PROG, error)
    from ..training.interrupts import INTERRUPTED_STATUS, InterruptWatch, interrupted_line
    from ..training.run import main

    watch = InterruptWatch()  # first: it has seen the step when a later callback is interrupted
    try:
        main(given=given, callbacks=[watch, *(callbacks or [])])
    except UsageError as error:  # a user error found before any work: one line, no traceback
        return user_error(PROG, error)
    except KeyboardInterrupt:  # Ctrl-C: where the run stopped and what it saved, in one line
        output_dir = _output_dir(given)
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


def _output_dir(given: GivenFlags) -> str | None:
    """--output_dir as given (for the Ctrl-C line of a run interrupted before training began)."""
    value = given.values.get("output_dir")
    return value if isinstance(value, str) else None


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
