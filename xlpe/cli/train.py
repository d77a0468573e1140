"""`xlpe-train`: the console script (the run itself is `xlpe.training.run.main`). A user error found before
any work prints one line and exits 2; Ctrl-C prints one line (the step reached, the newest checkpoint and how to
resume from it) and exits 130; a finished multi-process run tears its process group down cleanly.

The command line is parsed once, by `HfArgumentParser` over the argument dataclasses (`run_config.read_given`),
and the run gets the flags as parsed (`xlpe.training.run.main(given=...)`); the paths and languages given are
checked before any work. `--help` and a mistyped flag's "did you mean" are answered without torch from the help
cache (`xlpe.training.command_line`), which the real parser fills the first time it is built on a machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..features.language_codes import check_language_code
from ..training.command_line import GivenFlags, arguments_file, cached_help, read_arguments_file, unknown_options
from ..training.errors import UsageError, unknown_flags_message
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


def help_text() -> str:
    """The text of `xlpe-train --help`: the cached text of the real parser when the cache is current, else the
    parser's own (built once, with torch, then cached)."""
    cached = cached_help()
    if cached is not None:
        return cached["help"]
    from ..training.run_config import help_text as parser_help

    return parser_help()


# ---------------------------------------------------------------------------------------------------------
# User errors found before any work
# ---------------------------------------------------------------------------------------------------------


def early_values(argv: list[str]) -> dict:
    """The values of the path and language flags (`check_paths`) as spelled in `argv` (`--name value`,
    `--name=value`, dashes or underscores): checked before torch is imported. The run reads the one parse
    (`run_config.read_given`), whose values are checked again (abbreviations included)."""
    values = {}
    for k, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        name, _, value = token[2:].partition("=")
        name = name.replace("-", "_")
        if not value and k + 1 < len(argv) and not argv[k + 1].startswith("--"):
            value = argv[k + 1]
        checked = name in (*MODEL_OPTIONS, *LANGUAGE_OPTIONS, "prepared_dataset", "output_dir")
        if value and (checked or name.endswith(FILE_SUFFIX)):
            values[name] = value
    return values


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
    cached = cached_help()  # a mistyped flag is named before torch is imported, when the cache knows the options
    unknown = unknown_options(argv, cached["options"]) if cached else []
    if unknown:
        return user_error(PROG, CommandLineError(unknown_flags_message(unknown, cached["options"])))
    try:
        path = arguments_file(argv)
        if path is not None:  # `xlpe-train args.json`: read once, checked before torch is imported
            given = read_arguments_file(path)
            check_paths(given.values)
        else:
            check_paths(early_values(argv))  # the common mistakes, named before torch is imported
            from ..training.run_config import read_given

            given = read_given(argv)  # the one parse of the command line
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
