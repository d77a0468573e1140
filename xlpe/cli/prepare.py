"""`xlpe-prepare`: parallel text -> prepared features on disk, the directory `xlpe-train --prepared_dataset`
reads: the train / validation / test splits (`DatasetDict.save_to_disk`), `report.json` ({split: report}) and
`tokenizer/` (the one given, or a joint sub-word tokenizer trained on the training text, as `xlpe-train` would
train it). `xlpe.features.prepare` does the work. A user error prints one line and exits with status 2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..features.alignment import SYMMETRIZATIONS  # (light: numpy only)
from ..models.registry import extra_input_names  # (light: the registry imports no model module)
from ..models.taggers import tagger_help  # (light: the tagger registry, standard library only)
from . import CommandLineError, canonical_flags, check_model_path, console_script, hub_load_failure

# xlpe.features.prepare imports torch and transformers: imported when the command runs (fast --help); the
# --features choices are the registry's extra inputs (light: no model module is imported)


def __getattr__(name: str):
    if name == "FEATURE_CHOICES":  # the old constant: the registered extra inputs, read when asked
        return extra_input_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PREPARED_TOKENIZER_DIR = "tokenizer"  # = xlpe.features.prepare.PREPARED_TOKENIZER_DIR (tested)

PROG = "xlpe-prepare"
# = xlpe.features.sharded's defaults (tests/cli/test_help.py keeps them equal; that module imports datasets)
DEFAULT_SHARD_SIZE, DEFAULT_ALIGNMENT_SAMPLE, DEFAULT_TOKENIZER_SAMPLE = 100_000, 200_000, 200_000
DEFAULT_SHARD_EFLOMAL_OPTIONS = {"n_samplers": 2, "rel_iterations": 0.6}
AUTO_SHARD_PAIRS = 200_000  # --shard-size auto: files holding more pairs than this are prepared in shards
FILE_SPLITS = {"train": "", "validation": "validation-", "test": "test-"}  # split -> flag prefix
TOKENIZER_TRAINING = {"tokenizer_vocab_size": 8000, "tokenizer_model": "unigram"}  # xlpe-train's defaults
# The plan's estimate on 2 cores: a cost per word (tokenizer training, features; both sides) and, for the splits
# eflomal aligns, per source x target word product of each pair (its sampler scores every source word for every
# target word, so long sentences cost more than in proportion). Fitted to the wall time of two corpora of different
# lengths on a quiet 2-core machine: Multi30k fr-en (12,014 pairs, 288k words, 1.88M products: 19 s, 2026-11-27;
# this estimates 17.7 s) and WMT news de-en (13,500 pairs, 562k words, 7.63M products: 36 s, 2026-11-28; estimated
# 38.5 s). On 2 cores eflomal's two directions run side by side, so its quadratic part shows less in wall time than
# in CPU time (news: 73 CPU-s). A per-pair rate (650 pairs/s) had said 21 s for the news corpus.
SECONDS_PER_WORD_2_CORES = 5.5e-5
SECONDS_PER_WORD_PRODUCT_2_CORES = 1.0e-6


# ---------------------------------------------------------------------------------------------------------
# Arguments: the parser and its checks (user errors: one line, exit 2)
# ---------------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block): `xlpe-prepare: error: ...`, status 2."""

    def error(self, message: str):
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    src = p.add_argument_group("input: --source/--target files (plus validation/test files), or --dataset")
    src.add_argument("--source", help="training source text, one sentence per line (.gz ok)")
    src.add_argument("--target", help="training target text, parallel to --source")
    src.add_argument("--alignments", help="Pharaoh i-j links parallel to --source (default: run eflomal)")
    for split in ("validation", "test"):
        src.add_argument(f"--{split}-source", help=f"{split} source text (scored by xlpe-train)")
        src.add_argument(f"--{split}-target", help=f"{split} target text, parallel to --{split}-source")
        src.add_argument(f"--{split}-alignments", help=f"Pharaoh links of the {split} pairs (default: eflomal)")
    src.add_argument("--dataset", help="Hub dataset id or local datasets directory (its splits)")
    src.add_argument("--dataset-config", help="dataset configuration name (e.g. de-en)")
    src.add_argument("--splits", nargs="+", help="dataset splits to prepare (default: all)")
    src.add_argument(
        "--name",
        help="what this data is called in the model card of a model trained on it (e.g. "
        "'Multi30k fr-en, 10k pairs'; recorded in the report; default: --dataset, else "
        "the training files' names)",
    )
    src.add_argument("--source-lang", help="source language (e.g. de): the key in --dataset; recorded for xlpe-train")
    src.add_argument("--target-lang", help="target language (e.g. en): picks xlpe-train's BLEU tokenizer, the card's")
    src.add_argument("--source-column"), src.add_argument("--target-column")
    tok = p.add_argument_group("tokenizer (saved to OUTPUT/tokenizer either way)")
    tok.add_argument(
        "--tokenizer",
        help="tokenizer directory or Hub id (AutoTokenizer); default: train a joint one on the training text",
    )
    tok.add_argument("--tokenizer-vocab-size", type=int, help="pieces of a tokenizer trained here (default 8000)")
    tok.add_argument("--tokenizer-model", choices=("unigram", "bpe"), help="a tokenizer trained here (default unigram)")
    p.add_argument(
        "--output",
        required=True,
        help="directory for the splits, report.json and tokenizer/ (written aside, renamed into place when complete)",
    )
    p.add_argument("--overwrite-output", action="store_true", help="replace an existing --output directory")
    p.add_argument(
        "--features", nargs="+", choices=extra_input_names(), help="default: positions + tags of given taggers"
    )
    p.add_argument("--symmetrization", default="grow-diag-final-and", choices=SYMMETRIZATIONS)
    p.add_argument(
        "--eflomal-options",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="eflomal.Aligner arguments, e.g. '{\"n_samplers\": 1}'",
    )
    p.add_argument(
        "--alignment-seed",
        type=int,
        default=None,
        metavar="N",
        help="seed eflomal: the same corpus and options give the same links and oracle (Linux, a C compiler "
        "once; = --eflomal-options '{\"seed\": N}'; default: unseeded, as eflomal)",
    )
    p.add_argument(
        "--alignment-runs",
        type=int,
        default=1,
        metavar="K",
        help="eflomal runs per direction, links kept by a strict majority (stabler oracle, K x time)",
    )
    p.add_argument("--unaligned", default="right", choices=("right", "left"), help="BTG oracle attachment")
    p.add_argument("--dpe-unaligned", default="drop", choices=("drop", "keep"), help="DPE unaligned tokens")
    p.add_argument("--source-tagger", help=f"{tagger_help()} (the tagger registry; perceptron: xlpe-tagger train)")
    p.add_argument("--target-tagger", help=tagger_help())
    p.add_argument("--nltk-data", help="extra nltk_data directory (offline NLTK tagger)")
    p.add_argument("--max-length", type=int, default=256, help="max tokens per side incl. </s> (default 256)")
    p.add_argument("--num-proc", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--cache-dir", help="reuse identical earlier runs (features and trained tokenizer) from here")
    p.add_argument(
        "--overwrite-cache",
        action="store_true",
        help="recompute the features even when --cache-dir has them (and replace them there)",
    )
    p.add_argument("--noise-ratio", type=float, default=0.0, help="XL PE Sec. 4.5 noise attack ratio")
    p.add_argument("--seed", type=int, default=0)
    scale = p.add_argument_group(
        "corpus scale: sharded preparation (bounded memory, resumable, shards on many machines; docs/corpus_scale.md)"
    )
    scale.add_argument(
        "--shard-size",
        type=_shard_size,
        default="auto",
        metavar="N|auto",
        help=f"pairs per shard; auto (default): shards of {DEFAULT_SHARD_SIZE:,} once the files hold "
        f"more than {AUTO_SHARD_PAIRS:,} pairs, else one piece in memory",
    )
    scale.add_argument(
        "--work-dir",
        help="where plan, tokenizer, priors and finished shards live (default: OUTPUT.work); "
        "the same command run again resumes there",
    )
    scale.add_argument(
        "--stage",
        default="all",
        choices=("all", "plan", "shards", "merge"),
        help="all (default) | plan (one job) | shards (any number of jobs) | merge (one job, after all shards)",
    )
    scale.add_argument(
        "--shard-index",
        type=int,
        nargs="+",
        metavar="K",
        help="with --stage shards: the shards to run (e.g. $SLURM_ARRAY_TASK_ID; default: every unfinished one)",
    )
    scale.add_argument(
        "--alignment-sample",
        type=int,
        default=DEFAULT_ALIGNMENT_SAMPLE,
        metavar="N",
        help="pairs aligned once to learn the eflomal priors every shard starts from "
        f"(default {DEFAULT_ALIGNMENT_SAMPLE:,})",
    )
    scale.add_argument(
        "--tokenizer-sample",
        type=int,
        default=DEFAULT_TOKENIZER_SAMPLE,
        metavar="N",
        help=f"training pairs a tokenizer trained here sees (default {DEFAULT_TOKENIZER_SAMPLE:,})",
    )
    scale.add_argument(
        "--shard-eflomal-options",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="eflomal.Aligner arguments for the shards aligned from priors only (over --eflomal-options); "
        f"default {json.dumps(DEFAULT_SHARD_EFLOMAL_OPTIONS)} (half eflomal's cost); '{{}}': eflomal's "
        "own settings (agreement and cost: docs/corpus_scale.md)",
    )
    scale.add_argument("--keep-work-dir", action="store_true", help="keep the work directory after the merge")
    scale.add_argument(
        "--overwrite-work-dir",
        action="store_true",
        help="with --stage plan or all: remove a work directory planned from other files or flags and "
        "plan anew (every stage checks the inputs and flags against the plan)",
    )
    p.add_argument(
        "--keep-text",
        nargs="?",
        const="all",
        default="eval",
        choices=("all", "eval", "none"),
        help="splits that keep text, line number and alignment columns: eval (default: every split but "
        "train, what scoring needs), all (also --keep-text alone) or none",
    )
    return canonical_flags(p)


def _shard_size(value: str):
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of pairs or 'auto', got {value!r}") from None


def _flag(split: str, kind: str) -> str:
    return f"--{FILE_SPLITS[split]}{kind}"


def _file_flags() -> list[str]:
    return [_flag(split, kind) for split in FILE_SPLITS for kind in ("source", "target", "alignments")]


def _check_numbers(args) -> None:
    """Raise ValueError (one line, naming the flag, the expected range and the value) on a number out of range."""
    for name in (
        "max_length",
        "num_proc",
        "batch_size",
        "alignment_runs",
        "tokenizer_vocab_size",
        "alignment_sample",
        "tokenizer_sample",
        *(["shard_size"] if args.shard_size != "auto" else []),
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be >= 1, got {value}")
    if not 0.0 <= args.noise_ratio <= 1.0:
        raise ValueError(f"--noise_ratio must be in [0, 1], got {args.noise_ratio}")
    for flag in ("eflomal_options", "shard_eflomal_options"):
        value = getattr(args, flag)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"--{flag} must be a JSON object of eflomal.Aligner arguments, got {json.dumps(value)}")
    if args.alignment_seed is not None:
        given = (args.eflomal_options or {}).get("seed")
        if given is not None and given != args.alignment_seed:
            raise ValueError(f"--alignment-seed {args.alignment_seed} but --eflomal-options has seed {given}: give one")
        args.eflomal_options = {**(args.eflomal_options or {}), "seed": args.alignment_seed}
    if (args.eflomal_options or {}).get("seed") is not None:  # one check, whichever flag gave it
        from ..features.eflomal_seed import check_seed

        check_seed(args.eflomal_options["seed"])


def _check_combination(args) -> None:
    """Raise ValueError (one line) on a flag combination that cannot work; given files must exist; the output
    must not exist unless --overwrite_output."""
    from ..features.outputs import check_destination, check_not_input

    _check_numbers(args)
    from ..features.language_codes import check_language_code

    check_language_code(args.source_lang, "--source_lang")
    check_language_code(args.target_lang, "--target_lang")
    # never over an input (data files, --tokenizer, --dataset, the work directory), never over anything but an
    # earlier prepared dataset, even with --overwrite-output (xlpe.features.outputs)
    inputs = {
        **{flag: getattr(args, flag[2:].replace("-", "_")) for flag in _file_flags()},
        "--tokenizer": args.tokenizer,
        "--dataset": args.dataset,
        "--work-dir": args.work_dir,
    }
    check_destination(
        args.output,
        "--output",
        inputs,
        overwrite=args.overwrite_output,
        kind="dir",
        owns=("prepared-dataset",),
        allow_flag="--overwrite_output",
        exists_ok=args.stage not in ("all", "merge"),
    )
    if args.work_dir:
        check_not_input(args.work_dir, "--work-dir", {k: v for k, v in inputs.items() if k != "--work-dir"})
    if args.overwrite_work_dir and args.stage not in ("all", "plan"):
        raise ValueError(
            f"--overwrite-work-dir replaces the plan: give it with --stage plan (or all), not --stage {args.stage}"
        )
    if args.shard_index and args.stage != "shards":
        raise ValueError(f"--shard-index picks shards to run with --stage shards, not with --stage {args.stage}")
    file_flags = _file_flags()
    given_files = [flag for flag in file_flags if getattr(args, flag[2:].replace("-", "_"))]
    if args.dataset and given_files:
        raise ValueError(f"--dataset brings its own splits; {', '.join(given_files)} cannot be added to it")
    if not args.dataset and not (args.source or args.target):
        raise ValueError("give training text: --source and --target files, or --dataset")
    if args.dataset and not (args.source_lang and args.target_lang):
        raise ValueError("--dataset needs --source-lang and --target-lang")
    if not args.dataset:
        for split in FILE_SPLITS:
            source, target, links = (
                getattr(args, _flag(split, k)[2:].replace("-", "_")) for k in ("source", "target", "alignments")
            )
            if bool(source) != bool(target) or (links and not source):
                raise ValueError(
                    f"{_flag(split, 'source')} and {_flag(split, 'target')} go together"
                    + (f" (and {_flag(split, 'alignments')} needs them)" if links else "")
                )
        for flag in given_files:
            path = Path(getattr(args, flag[2:].replace("-", "_")))
            if not path.is_file():
                raise ValueError(f"{flag} {path}: no such file")
    if args.splits and not args.dataset:
        raise ValueError(
            "--splits selects splits of --dataset; files name their split by flag (--validation-source ...)"
        )
    sharded_flags = [
        f
        for f, v in (
            ("--shard-size N", args.shard_size != "auto"),
            ("--stage", args.stage != "all"),
            ("--overwrite-work-dir", args.overwrite_work_dir),
            ("--shard-eflomal-options", args.shard_eflomal_options is not None),
        )
        if v
    ]
    if args.dataset and sharded_flags:
        raise ValueError(
            f"{' and '.join(sharded_flags)} shard --source/--target files; --dataset is prepared in one "
            "piece (write its splits to text files to prepare it in shards)"
        )
    trained_here = [f"--{name.replace('_', '-')}" for name in TOKENIZER_TRAINING if getattr(args, name) is not None]
    if args.tokenizer and trained_here:
        raise ValueError(f"{', '.join(trained_here)} shape a tokenizer trained here; with --tokenizer none is trained")


# ---------------------------------------------------------------------------------------------------------
# Reading the data and the tokenizer
# ---------------------------------------------------------------------------------------------------------


def _read_splits(args) -> dict:
    from ..features.prepare import load_parallel_dataset, read_parallel_files

    if args.dataset:
        return load_parallel_dataset(
            args.dataset,
            args.source_lang,
            args.target_lang,
            args.splits,
            args.dataset_config,
            args.source_column,
            args.target_column,
        )
    return {
        split: read_parallel_files(f["source"], f["target"], f["alignments"]) for split, f in _split_files(args).items()
    }


def _tokenizer(args, splits):
    """(tokenizer, how it was obtained) for the report."""
    if args.tokenizer:
        from transformers import AutoTokenizer

        try:  # a missing local path is said as such, not as a failed connection to the Hub (as for --model)
            check_model_path(args.tokenizer, "--tokenizer", "a tokenizer directory")
        except CommandLineError as error:
            raise CommandLineError(f"{error} (leave --tokenizer out to train one on the training text)") from None
        from ..features.tokenization import check_tokenizer_files

        check_tokenizer_files(args.tokenizer, f"--tokenizer {args.tokenizer}")  # a damaged JSON file: file and line
        try:
            return AutoTokenizer.from_pretrained(args.tokenizer), args.tokenizer
        except (OSError, ValueError) as error:  # transformers' messages run over several lines: the first says what
            raise hub_load_failure(args.tokenizer, "--tokenizer", error) from None
    from ..features.prepare import train_tokenizer_for_splits

    options = {name: getattr(args, name) or default for name, default in TOKENIZER_TRAINING.items()}
    tokenizer = train_tokenizer_for_splits(
        splits,
        vocab_size=options["tokenizer_vocab_size"],
        model=options["tokenizer_model"],
        model_max_length=args.max_length,
        cache_dir=args.cache_dir,
    )
    return tokenizer, (
        f"trained here on the train split: joint {options['tokenizer_model']}, {len(tokenizer)} pieces "
        f"(--tokenizer_vocab_size {options['tokenizer_vocab_size']})"
    )


def _label_reports(args, reports: dict, tokenizer_origin: str) -> None:
    for report in reports.values():
        report["tokenizer"] = {
            **report.get("tokenizer", {}),
            "origin": tokenizer_origin,
            "path": PREPARED_TOKENIZER_DIR,
        }
        report["languages"] = {"source": args.source_lang, "target": args.target_lang}
        report["dataset_name"] = (
            args.name
            or args.dataset
            or " + ".join(
                f"{Path(path).parent.name}/{Path(path).name}".lstrip("/") for path in (args.source, args.target) if path
            )
        )


def _split_files(args) -> dict:
    files = {}
    for split in FILE_SPLITS:
        source, target, links = (
            getattr(args, _flag(split, k)[2:].replace("-", "_")) for k in ("source", "target", "alignments")
        )
        if source:
            files[split] = {"source": source, "target": target, "alignments": links}
    return files


# ---------------------------------------------------------------------------------------------------------
# Sharded preparation (corpora of millions of pairs)
# ---------------------------------------------------------------------------------------------------------


def _is_sharded(args) -> bool:
    """--stage other than all, a --shard-size number, or (auto) files holding more than AUTO_SHARD_PAIRS pairs."""
    if args.dataset:
        return False
    if args.stage != "all" or args.shard_size != "auto":
        return True
    from ..features.text_files import count_text_lines

    pairs = sum(count_text_lines(files["source"]) for files in _split_files(args).values())
    if pairs > AUTO_SHARD_PAIRS:
        print(
            f"{PROG}: {pairs:,} pairs: preparing in shards of {DEFAULT_SHARD_SIZE:,} (resumable; --shard-size to "
            "change)",
            file=sys.stderr,
        )
        return True
    return False


def _run_sharded(args, options: dict) -> int:
    """The sharded preparation (xlpe.features.sharded), stage by stage, under the work directory's lock."""
    from ..features import sharded
    from ..features.artefacts import directory_lock

    options = {**options, "shard_eflomal_options": args.shard_eflomal_options}
    work = Path(args.work_dir or f"{args.output}.work")
    # beside the work directory (planning anew and merging remove it): shard jobs share it, planning and merging
    # hold it alone, so a re-plan or a merge never removes the work of shard jobs still running
    lock = Path(work.parent, f".{work.name}.xlpe.lock")
    with directory_lock(work, f"xlpe-prepare --stage {args.stage}", shared=args.stage == "shards", lock_file=lock):
        return _run_sharded_stages(args, options, work, sharded)


def _run_sharded_stages(args, options: dict, work: Path, sharded) -> int:
    import shutil

    if args.stage in ("all", "plan"):
        tokenizer = _tokenizer(args, {})[0] if args.tokenizer else None
        tokenizer_options = (
            {}
            if args.tokenizer
            else {
                "vocab_size": args.tokenizer_vocab_size or TOKENIZER_TRAINING["tokenizer_vocab_size"],
                "model": args.tokenizer_model or TOKENIZER_TRAINING["tokenizer_model"],
                "model_max_length": args.max_length,
            }
        )
        shard_size = sharded.DEFAULT_SHARD_SIZE if args.shard_size == "auto" else args.shard_size
        plan = sharded.plan_preparation(
            work,
            _split_files(args),
            tokenizer=tokenizer,
            tokenizer_options=tokenizer_options,
            shard_size=shard_size,
            alignment_sample=args.alignment_sample,
            tokenizer_sample=args.tokenizer_sample,
            overwrite_work_dir=args.overwrite_work_dir,
            **options,
        )
    else:  # shards and merge jobs follow the plan; they check that they were given the same files and options (and
        # the shards check their lines, the merge every input file, against the plan's digests)
        plan = sharded.load_plan(work, options, _split_files(args))
    if args.stage == "plan":
        print(
            f"{PROG}: planned {len(plan['shards'])} shards in {work} (indices 0-{len(plan['shards']) - 1}); run them "
            f"with --stage shards --shard-index K, then --stage merge",
            file=sys.stderr,
        )
        return 0
    if args.stage in ("all", "shards"):
        ran = sharded.run_shards(work, plan, args.shard_index)
        print(
            f"{PROG}: ran {len(ran)} shard(s); {len(sharded.finished_shards(work, plan))} of {len(plan['shards'])} "
            f"done in {work}",
            file=sys.stderr,
        )
        if args.stage == "shards":
            return 0
    tokenizer_origin = (
        args.tokenizer
        if args.tokenizer
        else f"trained here on {plan['tokenizer'].get('trained_on_pairs')} "
        f"training pairs: joint {plan['tokenizer'].get('model')}"
    )
    output, reports = sharded.merge_shards(
        work,
        args.output,
        overwrite=args.overwrite_output,
        label=lambda reports: _label_reports(args, reports, tokenizer_origin),
    )
    if not args.keep_work_dir:
        shutil.rmtree(work, ignore_errors=True)
    _print_summary(output, reports, tokenizer_origin)
    return 0


# ---------------------------------------------------------------------------------------------------------
# Summary and entry point
# ---------------------------------------------------------------------------------------------------------


def _plan_line(args, splits: dict) -> str:
    """What `xlpe-prepare` will do, and about how long it takes at the documented rate."""
    sizes = {name: len(split.sources) for name, split in splits.items()}
    total = sum(sizes.values())
    steps = ["train a joint tokenizer on the train split"] if not args.tokenizer else []
    aligning = [name for name, split in splits.items() if split.alignments is None]
    if aligning:
        steps.append(f"align the words of {', '.join(aligning)} with eflomal (both directions)")
    steps.append("read off the features (" + ", ".join(args.features or ["positions", "tags of given taggers"]) + ")")
    words, products = estimate_work(splits, aligning)
    seconds = words * SECONDS_PER_WORD_2_CORES + products * SECONDS_PER_WORD_PRODUCT_2_CORES
    about = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
    return (
        f"{PROG}: plan: {total:,} pairs ({', '.join(f'{name} {size:,}' for name, size in sizes.items())}): "
        f"{'; '.join(steps)}; about {about} on 2 cores for {words:,} words ({words / max(total, 1):.0f} a pair; "
        "longer sentences cost more than in proportion, more cores are faster, a loaded machine slower)"
    )


def estimate_work(splits: dict, aligning: list[str]) -> tuple[int, int]:
    """(words on both sides of every split, sum over the pairs of the `aligning` splits of source words x target
    words): what the plan's estimate of `xlpe-prepare`'s time is proportional to."""
    words = products = 0
    for name, split in splits.items():
        lengths = [(len(s.split()), len(t.split())) for s, t in zip(split.sources, split.targets)]
        words += sum(m + n for m, n in lengths)
        if name in aligning:
            products += sum(m * n for m, n in lengths)
    return words, products


def _print_summary(output, reports: dict, tokenizer_origin: str, seconds: float | None = None) -> None:
    for name, report in reports.items():
        print(
            f"{PROG}: {name}: kept {report['pairs_kept']} of {report['pairs_read']}, skipped {report['pairs_skipped']}",
            file=sys.stderr,
        )
    print(
        f"{PROG}: wrote {output} (splits {', '.join(reports)}), {output / 'report.json'} and "
        f"{output / PREPARED_TOKENIZER_DIR} ({tokenizer_origin})",
        file=sys.stderr,
    )
    if seconds is not None:
        pairs = sum(report["pairs_read"] for report in reports.values())
        print(
            f"{PROG}: took {seconds:.0f} s ({pairs / max(seconds, 1e-9):,.0f} pairs/s on this machine)", file=sys.stderr
        )


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `xlpe-prepare`: prepare every split, then write `--output` (`save_prepared`). A user
    error (bad flag combination, missing or malformed file) prints one line and exits with status 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    options = dict(
        features=args.features,
        symmetrization=args.symmetrization,
        eflomal_options=args.eflomal_options,
        alignment_runs=args.alignment_runs,
        unaligned=args.unaligned,
        dpe_unaligned=args.dpe_unaligned,
        source_tagger=args.source_tagger,
        target_tagger=args.target_tagger,
        nltk_data=args.nltk_data,
        max_length=args.max_length,
        num_proc=args.num_proc,
        batch_size=args.batch_size,
        cache_dir=args.cache_dir,
        overwrite_cache=args.overwrite_cache,
        noise_ratio=args.noise_ratio,
        seed=args.seed,
        keep_text=args.keep_text,
    )
    try:
        _check_combination(args)
        options["eflomal_options"] = args.eflomal_options  # with --alignment-seed merged in
        from ..features.prepare import prepare_splits, save_prepared

        if _is_sharded(args):
            return _run_sharded(args, options)
        started = time.perf_counter()
        splits = _read_splits(args)
        if not args.tokenizer:  # the plan comes once the inputs are known good: a user error stays one line
            print(_plan_line(args, splits), file=sys.stderr, flush=True)
        tokenizer, tokenizer_origin = _tokenizer(args, splits)
        if args.tokenizer:
            print(_plan_line(args, splits), file=sys.stderr, flush=True)
        prepared, reports = prepare_splits(splits, tokenizer, **options)
        _label_reports(args, reports, tokenizer_origin)
        output = save_prepared(args.output, prepared, reports, tokenizer, overwrite=args.overwrite_output)
    except (ValueError, LookupError, ImportError, OSError) as error:
        message = (
            " ".join(str(error).split())
            if not isinstance(error, OSError) or not error.filename
            else f"{error.filename}: {error.strerror}"
        )
        parser.exit(2, f"{PROG}: error: {message}\n")
    _print_summary(output, reports, tokenizer_origin, time.perf_counter() - started)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
