"""The `xlpe-compare` command: does a variant beat a plain Marian trained the same way on my data?

    xlpe-compare --source train.de --target train.en --validation_source dev.de --validation_target dev.en \
        --test_source test.de --test_target test.en --source_lang de --target_lang en --output_dir runs/compare

prepares the data once, trains every variant (default: stock Marian `--model_type vanilla` and XL PE Combination
with a reorderer attached) with N seeds the same way, and writes `report.md`, `report.json` and `report.png`: BLEU
and chrF, the paired bootstrap per seed against the first variant and the project's seed rule. The work is in
`xlpe.training.compare` (docs/compare.md); `--dry_run` prints the plan only. A rerun of the same command reuses
the finished runs and resumes the others.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from . import CommandLineError, canonical_flags, console_script, user_error

PROG = "xlpe-compare"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train variants (default: vanilla Marian vs XL PE Combination + reorderer) the same way on your "
        "data, N seeds each, and say whether each beats the first by the seed rule (docs/compare.md).",
    )
    data = parser.add_argument_group("data (raw files, as xlpe-prepare takes them, or a prepared dataset)")
    for name, text in (
        ("source", "training source file"),
        ("target", "training target file"),
        ("validation_source", "dev source file (optional)"),
        ("validation_target", "dev target file (optional)"),
        ("test_source", "test source file"),
        ("test_target", "test target file"),
    ):
        data.add_argument(f"--{name}", help=text)
    data.add_argument("--source_lang", help="source language code (with raw files)")
    data.add_argument("--target_lang", help="target language code (with raw files)")
    data.add_argument("--prepared_dataset", help="an xlpe-prepare output with a test split, instead of raw files")
    parser.add_argument("--output_dir", required=True, help="the comparison's folder (rerun the command to resume)")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="'NAME: FLAGS'",
        help="a variant: a name and its xlpe-train flags, e.g. 'xlpe-in: --model_type xlpe --xl_strategy in'; "
        "repeat it; the first is the baseline (default: 'vanilla: --model_type vanilla' and 'xlpe-combination: "
        "--model_type xlpe --xl_strategy combination'). An XL PE variant gets the comparison's reorderer unless it "
        "names --reorderer (--reorderer builtin: its built-in predictor)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant, 1..N (default: 3)")
    parser.add_argument(
        "--jobs", type=int, help="runs at a time (default: one per GPU; on CPU one per 4 cores, at least 1)"
    )
    parser.add_argument(
        "--train_args",
        default="",
        help="xlpe-train flags for every run, e.g. '--max_steps 2000' (one flag alone: --train_args=--fp16)",
    )
    parser.add_argument(
        "--prepare_args", default="", help="more xlpe-prepare flags, e.g. '--tokenizer_vocab_size 8000'"
    )
    parser.add_argument("--reorder_args", default="", help="more `xlpe-reorder train` flags, e.g. '--epochs 2'")
    parser.add_argument(
        "--probe_steps",
        type=int,
        default=10,
        help="steps timed per variant before the runs, for the plan's time estimate (0: no estimate; default: 10)",
    )
    parser.add_argument("--dry_run", action="store_true", help="print the plan only; nothing is run or written")
    return canonical_flags(parser)


def in_process_runner():
    """Runs the package's commands in this process (one run at a time): their output goes to the terminal."""
    from . import prepare, reorder, train, translate

    entry_points = {
        "xlpe-prepare": prepare.main,
        "xlpe-train": train.cli,
        "xlpe-reorder": reorder.main,
        "xlpe-translate": translate.main,
    }

    def runner(program, argv, log, env):
        try:
            return entry_points[program](list(argv))
        except SystemExit as stop:  # argparse's exit inside a command
            return stop.code if isinstance(stop.code, int) else 1
        except Exception:  # a command that crashed: its traceback, and the run counts as failed (as a subprocess)
            traceback.print_exc()
            return 1

    return runner


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from ..training.compare import (
            CompareRequest,
            RunFailed,
            parse_variants,
            run_compare,
            split_args,
            split_flags,
        )

        data = {
            name: getattr(args, name)
            for name in ("source", "target", "validation_source", "validation_target", "test_source", "test_target")
            if getattr(args, name)
        }
        request = CompareRequest(
            output_dir=args.output_dir,
            variants=parse_variants(args.variant),
            seeds=args.seeds,
            data=data,
            prepared_dataset=args.prepared_dataset,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            train_args=split_flags(args.train_args, "--train_args"),
            prepare_args=split_args(args.prepare_args, "--prepare_args"),
            reorder_args=split_args(args.reorder_args, "--reorder_args"),
            jobs=args.jobs,
            probe_steps=args.probe_steps,
        )
        try:
            run_compare(request, in_process=in_process_runner(), dry_run=args.dry_run)
        except RunFailed as failure:  # not a user error: the same command resumes
            print(f"{PROG}: {failure}", file=sys.stderr)
            return 1
    except (CommandLineError, ValueError) as error:
        return user_error(PROG, error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
