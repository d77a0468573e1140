"""`xlpe-reorder`: train, run and score the standalone test-time reorderer (XL PE's preorderer).

    train     --source S --target T [--alignments A] --output_dir R   aligns with eflomal when no alignments are
              given, prepares the oracle orders, trains (progress bar; resumes from R's last checkpoint; without
              --epochs, as many epochs, 1 to 3, as fit 10 minutes at the step time measured on a few batches),
              chooses the decoding prior for the source order on --calibration-pairs held-out pairs, and says when
              the reorderer does not beat keeping the source order there
    predict   --reorderer R --input F [--output O]   one line per input line: the predicted word order as 0-based
              source word indices (index k = the source word placed k-th); an empty line gives an empty line
    attach    --reorderer R --model M [--output_dir O]   put the reorderer inside an XL PE checkpoint (same
              tokenizer): from then on its predicted positions come from R, in `generate` and the pipeline
    jackknife --prepared P --folds K --output_dir J   a copy of a prepared dataset (`xlpe-prepare`) whose train
              split's reorder_positions are predicted, each fold by a reorderer trained on the other folds
              (the oracle kept as oracle_reorder_positions): `xlpe-train --prepared_dataset J/data` then trains the
              translation model on test-like positions (J/data); `--oracle-share S` keeps the oracle positions
              of a share S of the pairs (the mixed remedy)
    evaluate  --reorderer R --source S --target T [--alignments A]   word-level Kendall tau, fuzzy reordering
              score and exact match against the oracle, for the reorderer and for the monotone order (JSON on
              stdout, a table on stderr); --orders F scores an order file of another preorderer (e.g. lader)

User errors (missing files, mismatched alignment files, lines over the reorderer's limit, a bad number) print one
line and exit with status 2; Ctrl-C prints one line (for `train`: the step reached and the newest checkpoint, or
that nothing was saved) and exits with status 130. `--output` files are written beside their name and renamed
into place when complete; an existing one is replaced only with `--overwrite_output`. So is jackknife's J/data; a
finished J (one with J/data) is replaced only with `--overwrite_output` (its folds trained afresh), an unfinished
one is resumed fold by fold, as `train` resumes from its last checkpoint.

Reuse (docs/command_line.md, "Reruns, resumes and reused artefacts"): `train`'s R and `jackknife`'s J/folds (and
each J/folds/fold-K) record what made them (xlpe_artefact.json: digests of the data, alignments and tokenizer, and every
option that shapes the model; none may change on resume) and are locked while a run writes them. A rerun with the
same record reuses a finished R (one line says so) or resumes an unfinished R or J; a difference is a one-line error
naming it (but an R that saved nothing, no checkpoint and no model, is started over with the new options, in one
line), and `--overwrite_output` starts afresh (in R it removes only what `train` writes there; a directory
holding another kind of artefact, a translation model say, is never replaced), as it does for a finished R or J.
`--no-resume` restarts a `train` run of the same record. predict, evaluate and attach refuse by name a --reorderer that
is not a finished reorderer written by `train` (a translation model, a jackknife fold, an unfinished run) and attach a
--model that is not an XL PE model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ..features.alignment import AlignmentFormatError  # (light: numpy only)
from ..features.text_files import check_output, write_text_atomic
from ..training.flag_facts import APPLIED, DIGEST, PART, PLUMBING, RESUME_APPLY, add_flag, names_where, parser_facts
from . import canonical_flags, console_script, did_you_mean_directory, user_error

# = xlpe.models.configuration_reorderer.TRAINING_LOSSES, spelled out: importing xlpe.models loads torch, and
# --help should not (tests/cli/test_help.py keeps the two equal)
TRAINING_LOSSES = ("pairwise", "btg_crf", "pairwise+btg_crf")

logger = logging.getLogger("xlpe.reorder")


# ---------------------------------------------------------------------------------------------------------
# Reuse: what made train's --output_dir and jackknife's J/folds, checked before any work (xlpe.features.artefacts)
# ---------------------------------------------------------------------------------------------------------


JACKKNIFE_UNFINISHED = "UNFINISHED"  # in J/folds/ while a jackknife run into J has not written J/data yet
LOCK_NAME, RECORD_NAME = ".xlpe.lock", "xlpe_artefact.json"  # = xlpe.features.artefacts' (not imported here: --help)


def command_facts(command: str) -> dict:
    """{flag: facts} of a subcommand's flags (`flag_facts.add_flag`): what its record keeps, what a resume may
    change; the records below are derived from them."""
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return parser_facts(commands.choices[command])


def recorded_options(command: str, args) -> dict:
    """The options a subcommand's record keeps by value: its flags whose facts say so."""
    return {name: getattr(args, name) for name, facts in command_facts(command).items() if facts.record == "value"}


def train_record(args, given_tokenizer=None):
    """The ArtefactRecord of kind "reorderer" a `train` run into --output_dir writes: digests of the source, target
    and alignment files and of the given tokenizer (else how the joint one is trained), and every option that shapes
    the model (model, training, preparation, calibration)."""
    from ..features.artefacts import ArtefactRecord, file_digest
    from ..features.tokenization import tokenizer_fingerprint
    from ..training.reorderer import REORDERER_KIND, default_training_loss

    prepared = getattr(args, "prepared_train", None)
    if prepared is not None:  # the prepared train split (its oracle orders come from xlpe-prepare's alignments)
        from ..training.reorderer import dataset_digest

        inputs = {"prepared_train": dataset_digest(prepared)}
    else:
        inputs = {"source": file_digest(args.source), "target": file_digest(args.target)}
    options = recorded_options("train", args)
    options["training_loss"] = args.training_loss or default_training_loss(args.decoder)  # (its default: --decoder's)
    if args.alignments:
        inputs["alignments"] = file_digest(args.alignments)
    elif prepared is None:
        options["alignments"] = {"eflomal_runs": args.alignment_runs}
    if given_tokenizer is not None:
        inputs["tokenizer"] = tokenizer_fingerprint(given_tokenizer)
    else:
        options["tokenizer"] = {"trained": args.tokenizer_model, "vocab_size": args.vocab_size}
    return ArtefactRecord(REORDERER_KIND, inputs=inputs, options=options)


def _train_plan(output: Path, expected, args) -> str:
    """What `train` does with --output_dir (checked before any work; the caller holds its lock): "fresh", "resume"
    or "reuse"; an ArtefactMismatch (one line, naming --overwrite_output) for a reorderer made otherwise or
    files of an unrecorded one; a ValueError for a directory holding another kind of artefact (never replaced).
    A run made otherwise that saved nothing (`saved_entries`: no checkpoint, no model; an interrupted run's record,
    tokenizer and logs do not count) is started over with the new options, saying so in one line."""
    from ..features.artefacts import ArtefactMismatch, read_record, verify_artefact, write_record
    from ..training.reorderer import (
        REORDERER_KIND,
        REPORT_NAME,
        clear_owned,
        model_type_of,
        owned_entries,
        saved_entries,
    )

    flag = f"--output_dir {output}"
    record = read_record(output)  # a damaged one: ArtefactMismatch naming the file and line
    model_type = model_type_of(output)
    kind = record.kind if record is not None else model_type if model_type not in (None, "xlpe_reorderer") else None
    if kind is not None and kind != REORDERER_KIND:
        raise ValueError(
            f"{flag}: holds a {kind}, not a reorderer; choose another directory (--overwrite_output "
            "replaces only a reorderer)"
        )
    finished = (output / REPORT_NAME).is_file() and (output / "config.json").is_file()
    if record is None and not owned_entries(output):
        plan = "fresh"  # a new or empty directory (or one with the user's own files only: they stay)
    elif args.overwrite_output and (finished or not _matches(output, expected)):
        logger.info("--overwrite_output: replacing the reorderer in %s (trained afresh)", output)
        plan = "fresh"
    elif record is not None and not saved_entries(output) and not _matches(output, expected):
        # an interrupted run that saved no checkpoint and no model: nothing of value is lost by starting over
        print(
            f"xlpe-reorder train: nothing was saved by the interrupted run in {output}; starting over with the "
            "new options",
            file=sys.stderr,
        )
        plan = "fresh"
    else:
        verify_artefact(output, expected, override="--overwrite_output", what=flag)
        plan = "restart" if args.no_resume else "reuse" if finished else "resume"
    if plan in ("fresh", "restart"):
        clear_owned(output)
        write_record(output, expected)
        return "fresh"
    if plan == "resume" and not list(output.glob("checkpoint-*")) and (output / "config.json").is_file():
        raise ArtefactMismatch(
            f"{flag}: holds a reorderer without its training report ({REPORT_NAME}); pass "
            "--overwrite_output to train it anew",
            str(output),
            "report",
        )
    return plan


def _matches(directory: Path, expected) -> bool:
    from ..features.artefacts import ArtefactMismatch, verify_artefact

    try:
        verify_artefact(directory, expected, override="")
    except ArtefactMismatch:
        return False
    return True


def _reused_train_result(output: Path) -> dict:
    from ..training.reorderer import REPORT_NAME

    def read(path: Path) -> dict:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            where = f":{error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
            raise ValueError(f"{path}{where}: damaged ({error}); pass --overwrite_output to train it anew") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected a JSON object; pass --overwrite_output to train it anew")
        return value

    report, config = read(output / REPORT_NAME), read(output / "config.json")
    summary = {key: report.get(key) for key in ("pairs_read", "pairs_kept", "pairs_skipped")}
    return {
        "output_dir": str(output),
        "reused": True,
        **summary,
        "training_pairs": report.get("train_pairs"),
        "calibration_pairs": report.get("calibration_pairs", 0),
        "order_prior": config.get("order_prior"),
        "oracle_mean_kendall_tau_vs_monotone": report.get("oracle_mean_kendall_tau_vs_monotone"),
        **{key: report.get(key) for key in ("mean_kendall_tau", "monotone_mean_kendall_tau", "beats_source_order")},
    }


def jackknife_record(args, train, tokenizer):
    """The ArtefactRecord of kind "jackknife" in J/folds: digests of the prepared train split and the tokenizer, and the
    options of its folds (--oracle_share too: the only one a resume may change, it mixes after the folds)."""
    from ..features.artefacts import ArtefactRecord
    from ..features.tokenization import tokenizer_fingerprint
    from ..training.reorderer import JACKKNIFE_KIND, dataset_digest, default_training_loss

    options = recorded_options("jackknife", args)
    options["training_loss"] = args.training_loss or default_training_loss(None)
    inputs = {"train": dataset_digest(train), "tokenizer": tokenizer_fingerprint(tokenizer)}
    return ArtefactRecord(JACKKNIFE_KIND, inputs=inputs, options=options)


def _jackknife_plan(work_dir: Path, expected, args) -> None:
    """Make J/folds ready for this run (the caller holds its lock): a finished J (replaced: --overwrite_output is
    checked by `check_arguments`) starts afresh (J/folds emptied; J/data stays readable until the new one replaces
    it); an unfinished one is resumed when its record matches (--oracle_share may change), else it is an
    ArtefactMismatch naming --overwrite_output (its fold checkpoints were trained on other folds, data or options),
    with which it starts afresh."""
    from ..features.artefacts import ArtefactMismatch, verify_artefact, write_record

    marker = work_dir / JACKKNIFE_UNFINISHED
    started = marker.exists() or any(p.name not in (LOCK_NAME, RECORD_NAME) for p in work_dir.iterdir())
    if (work_dir.parent / "data").exists() and not marker.exists():  # finished
        logger.info("replacing the finished jackknife in %s: its folds are trained afresh", work_dir.parent)
        _empty(work_dir)
    elif started:
        try:
            changed = verify_artefact(
                work_dir,
                expected,
                override="--overwrite_output",
                changeable=list(names_where(command_facts("jackknife"), resume=RESUME_APPLY)),
                what=f"--output_dir {work_dir.parent} (an unfinished jackknife)",
            )
        except ArtefactMismatch as mismatch:
            if not args.overwrite_output:
                raise
            logger.info("--overwrite_output: %s; its folds are trained afresh", str(mismatch).split("; pass")[0])
            _empty(work_dir)
        else:
            logger.info("resuming the unfinished jackknife in %s", work_dir.parent)
            for name, before, after in changed:
                print(
                    f"xlpe-reorder jackknife: resuming with --{name} {after} (was {before}): it only mixes the "
                    "folds' positions",
                    file=sys.stderr,
                )
    write_record(work_dir, expected)


def _empty(directory: Path) -> None:
    """Remove what `directory` holds but its lock (held by this run), the record first."""
    import shutil

    (directory / RECORD_NAME).unlink(missing_ok=True)
    for path in directory.iterdir():
        if path.name != LOCK_NAME:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


# ---------------------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------------------


def _tokenizer_for_training(args, sources: list[str], targets: list[str], given=None):

    from ..features.tokenization import train_joint_tokenizer

    output = Path(args.output_dir)
    if given is not None:
        return given
    if (output / "tokenizer.json").is_file():  # resuming (the record matched): the tokenizer trained by the first run
        return _load_tokenizer(output, "--output_dir")
    logger.info(
        "training a joint %s tokenizer (%d pieces) on %d pairs", args.tokenizer_model, args.vocab_size, len(sources)
    )
    tokenizer = train_joint_tokenizer(
        sources + targets, vocab_size=args.vocab_size, model=args.tokenizer_model, model_max_length=args.max_length
    )
    output.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(output)
    return tokenizer


def run_train(args) -> dict:

    from ..features.artefacts import directory_lock
    from ..features.corpus import read_parallel_files

    if args.prepared:
        split, given = None, _prepared_for_training(args)
    else:
        split = read_parallel_files(args.source, args.target, args.alignments)
        given = _load_tokenizer(args.tokenizer, "--tokenizer") if args.tokenizer else None
    output = Path(args.output_dir)
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output_dir {output}: is a file, expected a directory")
    with directory_lock(output, "xlpe-reorder train"):
        if args.epochs is None:  # the epochs an earlier run of the same record chose (it is resumed or reused)
            _adopt_recorded_epochs(output, args, given)
        expected = train_record(args, given)
        plan = _train_plan(output, expected, args)
        if plan == "reuse":
            print(
                f"xlpe-reorder train: {output} already holds this reorderer (same data and options): reused, "
                "not retrained; pass --overwrite_output to train it anew",
                file=sys.stderr,
            )
            return _reused_train_result(output)
        return _train(args, split, output, given, resume=plan == "resume", expected=expected)


def _adopt_recorded_epochs(output: Path, args, given) -> None:
    """With no --epochs: take the epochs recorded in --output_dir when everything else in its record matches
    this run (an earlier run chose them from its estimate; resuming or reusing it keeps them), saying so."""
    import copy

    from ..features.artefacts import ArtefactMismatch, read_record

    try:
        record = read_record(output)
    except ArtefactMismatch:  # damaged: _train_plan names it
        return
    epochs = record.options.get("epochs") if record is not None else None
    if not isinstance(epochs, int | float) or isinstance(epochs, bool) or epochs <= 0:
        return
    candidate = copy.copy(args)
    candidate.epochs = float(epochs)
    if _matches(output, train_record(candidate, given)):
        args.epochs, args.epochs_adopted = float(epochs), True
        print(
            f"xlpe-reorder train: --epochs not given: {epochs:g}, as the run that made {output} chose them "
            "(give --epochs to choose)",
            file=sys.stderr,
        )


def _prepared_for_training(args):
    """The tokenizer of `--prepared` (checked against --tokenizer when both are given); sets `args.prepared_train`
    (its train split, the columns a reorderer trains on) and `args.prepared_report` (its train report)."""
    import datasets

    from ..features.tokenization import tokenizer_fingerprint

    folder = Path(args.prepared)
    loaded = datasets.load_from_disk(str(folder))
    train = loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded
    if "reorder_positions" not in train.column_names:
        raise ValueError(
            f"--prepared {folder}: the train split has no reorder_positions (xlpe-prepare --features reorder_positions)"
        )
    if not (folder / "tokenizer").is_dir():
        raise ValueError(f"--prepared {folder}: has no tokenizer/ (an xlpe-prepare --output has)")
    tokenizer = _load_tokenizer(folder / "tokenizer", "--prepared")
    if args.tokenizer:
        given = _load_tokenizer(args.tokenizer, "--tokenizer")
        if tokenizer_fingerprint(given) != tokenizer_fingerprint(tokenizer):
            raise ValueError(
                f"--tokenizer {args.tokenizer} is not the tokenizer --prepared {folder} was made with "
                f"({folder / 'tokenizer'}): the oracle orders are over its pieces"
            )
    report_file = folder / "report.json"
    reports = json.loads(report_file.read_text(encoding="utf-8")) if report_file.is_file() else {}
    args.prepared_report = reports.get("train", reports) if isinstance(reports, dict) else {}
    args.prepared_train = train.select_columns(
        [c for c in ("input_ids", "attention_mask", "labels", "reorder_positions") if c in train.column_names]
    )
    print(
        f"xlpe-reorder train: {len(train):,} pairs of {folder}'s train split with the oracle orders xlpe-prepare made "
        "(its alignments reused: nothing is aligned again)",
        file=sys.stderr,
    )
    return tokenizer


def _train(args, split, output: Path, given, resume: bool, expected=None) -> dict:
    from ..evaluation.model_loading import load_whole
    from ..features.artefacts import write_record
    from ..features.prepare import prepare_splits
    from ..models.modeling_reorderer import XLPEReordererModel
    from ..training.checkpoint_averaging import newest_whole_checkpoint
    from ..training.reorderer import (
        ReordererTraining,
        build_reorderer,
        calibration_split,
        does_not_beat_line,
        train_reorderer,
    )

    if split is None:  # --prepared: its train split, oracle orders from xlpe-prepare's alignments
        tokenizer, data = given, {"train": args.prepared_train}
        recorded = getattr(args, "prepared_report", {}) or {}
        report = {
            "pairs_read": recorded.get("pairs_read", len(data["train"])),
            "pairs_kept": len(data["train"]),
            "pairs_skipped": recorded.get("pairs_skipped", {}),
            "mean_kendall_tau": recorded.get("mean_kendall_tau"),
        }
    else:
        tokenizer = _tokenizer_for_training(args, split.sources, split.targets, given)
        data, report = prepare_splits(
            {"train": split},
            tokenizer,
            features=["reorder_positions"],
            max_length=args.max_length,
            alignment_runs=args.alignment_runs,
            cache_dir=args.cache_dir,
            keep_text=False,
            seed=args.seed,
        )
        report = report["train"]
    logger.info(
        "oracle orders: kept %d of %d pairs, skipped %s",
        report["pairs_kept"],
        report["pairs_read"],
        report["pairs_skipped"],
    )
    checkpoint = newest_whole_checkpoint(output, "xlpe-reorder resume") if resume else None
    if checkpoint:  # same architecture as the interrupted run (the record matched)
        model = load_whole(XLPEReordererModel, checkpoint)
    else:
        model = build_reorderer(
            tokenizer,
            seed=args.seed,
            d_model=args.d_model,
            token_layers=args.token_layers,
            word_layers=args.word_layers,
            decoder=args.decoder,
            pair_scorer=args.pair_scorer,
            **_given(training_loss=args.training_loss),
        )
    train, held_out = calibration_split(
        data["train"], args.calibration_pairs, args.seed
    )  # seeded: a resumed run holds out the same
    if args.epochs is None:  # not given: as many as fit the time budget, recorded (a resume keeps them)
        args.epochs = _estimated_epochs(model, train, args)
        if expected is not None:
            expected.options["epochs"] = args.epochs
            write_record(output, expected)
    options = ReordererTraining(
        epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed
    )
    summary = {
        "pairs_read": report["pairs_read"],
        "pairs_kept": report["pairs_kept"],
        "pairs_skipped": report["pairs_skipped"],
        "calibration_pairs": len(held_out) if held_out is not None else 0,
        "oracle_mean_kendall_tau_vs_monotone": report.get("mean_kendall_tau"),
    }
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its logs; stdout carries the JSON only
        model = train_reorderer(
            model,
            train,
            output,
            options,
            tokenizer=tokenizer,
            resume=resume,
            calibration_dataset=held_out,
            report_extra=summary,
            callbacks=[args.interrupt_watch] if getattr(args, "interrupt_watch", None) else None,
        )
    comparison = _source_order_comparison(output)
    if comparison.get("beats_source_order") is False:
        line = does_not_beat_line(
            comparison["mean_kendall_tau"], comparison["monotone_mean_kendall_tau"], summary["calibration_pairs"]
        )
        print(f"xlpe-reorder train: {line}", file=sys.stderr)
    return {
        "output_dir": str(output),
        "pairs_read": report["pairs_read"],
        "pairs_kept": report["pairs_kept"],
        "pairs_skipped": report["pairs_skipped"],
        "training_pairs": len(train),
        "calibration_pairs": summary["calibration_pairs"],
        "order_prior": model.config.order_prior,
        "oracle_mean_kendall_tau_vs_monotone": report.get("mean_kendall_tau"),
        "epochs": args.epochs,
        **comparison,
    }


def _estimated_epochs(model, train, args) -> float:
    """The default epochs: as many whole ones (1 to MAX_DEFAULT_EPOCHS) as fit EPOCH_BUDGET_SECONDS of training
    at the step time measured on a few batches of this data on this machine; the plan is printed in one line."""
    import math

    from ..training.reorderer import (
        EPOCH_BUDGET_SECONDS,
        MAX_DEFAULT_EPOCHS,
        default_epochs,
        training_step_seconds,
    )

    step = training_step_seconds(model, train, args.batch_size, args.seed)
    steps_per_epoch = math.ceil(len(train) / args.batch_size)
    epoch_seconds = step * steps_per_epoch
    epochs = default_epochs(epoch_seconds)
    print(
        f"xlpe-reorder train: --epochs not given: {epochs} (estimated {_minutes(epochs * epoch_seconds)} of "
        f"training; one epoch of {len(train):,} pairs is {steps_per_epoch:,} steps at {step:.2f} s a step, timed "
        f"on a few batches here): as many as fit {_minutes(EPOCH_BUDGET_SECONDS)}, at least 1, at most "
        f"{MAX_DEFAULT_EPOCHS}; give --epochs to choose",
        file=sys.stderr,
        flush=True,
    )
    return float(epochs)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _source_order_comparison(output: Path) -> dict:
    """The held-out comparison with the source order that train_reorderer wrote into the report (empty if none)."""
    from ..training.reorderer import REPORT_NAME

    keys = ("mean_kendall_tau", "monotone_mean_kendall_tau", "beats_source_order")
    try:
        report = json.loads((output / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {key: report.get(key) for key in keys} if isinstance(report, dict) else {}


def _given(**fields) -> dict:
    """The fields the user gave (not None): the others keep build_reorderer's defaults."""
    return {name: value for name, value in fields.items() if value is not None}


def _load_tokenizer(path, flag: str):
    """AutoTokenizer of the folder `path`; a damaged JSON file of it -> ValueError naming the file and line."""
    from transformers import AutoTokenizer

    from ..features.tokenization import check_tokenizer_files

    check_tokenizer_files(path, f"{flag} {path}")
    return AutoTokenizer.from_pretrained(path)


def _load_reorderer(path: str, order_prior: float | None = None):
    from ..evaluation.model_loading import load_whole
    from ..models.modeling_reorderer import XLPEReordererModel
    from ..training.reorderer import check_reorderer_dir

    check_reorderer_dir(path, "--reorderer")  # a translation model, a fold, an unfinished run: refused by name
    model = load_whole(XLPEReordererModel, path).eval()
    if order_prior is not None:
        model.config.order_prior = order_prior
    return model, _load_tokenizer(path, "--reorderer")


def run_predict(args) -> dict:
    from ..features.predicted_reordering import (
        order_from_positions,
        predict_word_positions,
    )
    from ..features.text_files import read_text_lines

    lines = read_text_lines(args.input)
    model, tokenizer = _load_reorderer(args.reorderer, args.order_prior)
    positions, long_lines = predict_word_positions(model, tokenizer, lines, args.batch_size, args.long_lines)
    text = "".join(" ".join(map(str, order_from_positions(p))) + "\n" for p in positions)
    if args.output:
        write_text_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    if long_lines:
        print(
            f"xlpe-reorder: {len(long_lines)} lines over the reorderer's limit kept their order: {long_lines[:10]}",
            file=sys.stderr,
        )
    return {"lines": len(lines), "empty_lines": sum(1 for p in positions if not p), "long_lines_monotone": long_lines}


def run_attach(args) -> dict:
    """The model with the reorderer inside, written to --output_dir or into --model itself, under the folder's lock
    (a run writing there, e.g. `xlpe-train` resuming into it, is named and nothing is written) and atomically: the
    new files are staged beside the folder and swapped in, config.json last (`files_swapped_into`); a failure
    leaves the folder as it was, never a config that names a reorderer whose weights are not there."""
    from ..features.artefacts import DirectoryInUse, directory_lock

    output = Path(args.output_dir or args.model)
    flag = "--output_dir" if args.output_dir else "--model"
    try:
        lock = directory_lock(output, f"xlpe-reorder attach --model {args.model}")
        lock.__enter__()
    except DirectoryInUse as error:
        raise ValueError(f"{flag} {error}") from None
    try:
        return _attach(args, output)
    finally:
        lock.__exit__(None, None, None)


def _attach(args, output: Path) -> dict:
    from transformers import AutoModelForSeq2SeqLM

    from ..evaluation.model_loading import WeightsConfigMismatch, load_whole
    from ..features.text_files import files_swapped_into
    from ..training.model_setup import attach_reorderer
    from ..training.reorderer import check_reorderer_dir, copy_training_report, model_type_of

    check_reorderer_dir(args.reorderer, "--reorderer")  # before the model is loaded or anything written
    if not Path(args.model).expanduser().is_dir():
        raise FileNotFoundError(f"--model {args.model}: no such local directory{did_you_mean_directory(args.model)}")
    model_type = model_type_of(args.model)
    if model_type is None:
        raise FileNotFoundError(f"--model {args.model}: no model there (config.json missing)")
    if model_type == "xlpe_reorderer":
        raise ValueError(
            f"--model {args.model}: holds a reorderer, not an XL PE translation model (--model and "
            "--reorderer swapped?)"
        )
    try:
        model, tokenizer = load_whole(AutoModelForSeq2SeqLM, args.model), _load_tokenizer(args.model, "--model")
    except WeightsConfigMismatch as error:
        raise ValueError(f"--model {error}") from None
    except (ValueError, OSError, KeyError) as error:
        raise ValueError(
            f"--model {args.model}: cannot load a translation model with its tokenizer "
            f"(model_type {model_type}): {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from None
    if not hasattr(model, "attach_reorderer"):
        raise ValueError(
            f"--model {args.model}: holds a {model_type} model, not an XL PE model: a reorderer "
            "gives positions to XL PE models only"
        )
    attach_reorderer(model, args.reorderer, tokenizer)
    output.mkdir(parents=True, exist_ok=True)  # (--output_dir; its lock file is already there)
    with files_swapped_into(output, stale=_old_weight_file) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        report = copy_training_report(args.reorderer, staging)  # OUTPUT/reorderer/reorderer_training.json
    report = output / report.relative_to(staging) if report else None
    from ..training.model_card import rerender_in_place

    card = rerender_in_place(output, args.model)  # the card says what supplies the positions now
    return {
        "model": str(output),
        "reorderer": args.reorderer,
        "reorderer_report": str(report) if report else None,
        "model_card": str(output / "README.md") if card else None,
    }


def _old_weight_file(name: str) -> bool:
    """An earlier save's weight file that the new save does not replace (shards of a differently sharded save)."""
    return name.startswith("model") and (name.endswith(".safetensors") or name.endswith(".safetensors.index.json"))


def run_jackknife(args) -> dict:
    """J/folds/fold-K (one reorderer per fold, its checkpoints written as it trains) and then J/data (the dataset,
    written aside and renamed into place). J/folds/UNFINISHED marks a run that has not finished: its folds are
    resumed when J/folds' record (`jackknife_record`) and each fold's (`fold_records`) match this run. A finished J
    (J/data, no marker) is replaced only with --overwrite_output (checked before any work, `check_arguments`): its
    fold work is discarded and the folds are trained afresh, while its J/data stays readable until the new one
    replaces it. J/folds is locked while the run writes J."""
    import datasets

    from ..features.artefacts import directory_lock
    from ..features.text_files import atomic_output_dir
    from ..training.reorderer import ReordererTraining, jackknife_positions, mix_positions, with_predicted_positions

    output = Path(args.output_dir)
    data_dir, work_dir = output / "data", output / "folds"
    marker = work_dir / JACKKNIFE_UNFINISHED
    loaded = datasets.load_from_disk(args.prepared)
    data = loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    train = data["train"]
    if "reorder_positions" not in train.column_names:
        raise ValueError(
            f"--prepared {args.prepared}: the train split has no reorder_positions "
            "(xlpe-prepare --features reorder_positions)"
        )
    tokenizer = _load_tokenizer(args.tokenizer, "--tokenizer")
    options = ReordererTraining(
        epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed
    )
    expected = jackknife_record(args, train, tokenizer)
    with directory_lock(work_dir, "xlpe-reorder jackknife"):
        _jackknife_plan(work_dir, expected, args)
        write_text_atomic(marker, "a jackknife run writing ../data has not finished: rerunning it resumes the folds\n")
        with contextlib.redirect_stdout(sys.stderr):
            predicted = jackknife_positions(
                train,
                tokenizer,
                args.folds,
                options,
                work_dir,
                d_model=args.d_model,
                token_layers=args.token_layers,
                word_layers=args.word_layers,
                **_given(training_loss=args.training_loss),
            )
        if args.oracle_share:
            predicted = mix_positions(predicted, train["reorder_positions"], args.oracle_share, args.seed)
        train = data["train"] = with_predicted_positions(train, predicted)
        with atomic_output_dir(data_dir, overwrite=args.overwrite_output) as staging:
            data.save_to_disk(str(staging))
        marker.unlink()
    return {"output": str(data_dir), "train_pairs": len(train), "folds": args.folds}


def read_orders(path: str, word_counts: list[int]) -> list[list[int]]:
    """An order file (line k: 0-based source word indices in new order) -> positions, validated per line."""
    from ..features.text_files import read_text_lines

    lines = read_text_lines(path)
    if len(lines) != len(word_counts):
        raise ValueError(f"{path} has {len(lines)} lines but the source has {len(word_counts)}")
    positions = []
    for number, (line, count) in enumerate(zip(lines, word_counts), start=1):
        try:
            order = [int(x) for x in line.split()]
        except ValueError:
            raise ValueError(f"{path}:{number}: not a list of word indices: {line[:60]!r}") from None
        if sorted(order) != list(range(count)):
            raise ValueError(f"{path}:{number}: expected a permutation of 0..{count - 1}, got {line[:60]!r}")
        slots = [0] * count
        for slot, word in enumerate(order):
            slots[word] = slot
        positions.append(slots)
    return positions


def run_evaluate(args) -> dict:
    from ..evaluation.alignment_quality import reordering_quality
    from ..features.alignment import align_with_eflomal
    from ..features.corpus import read_parallel_files
    from ..features.predicted_reordering import predict_word_positions
    from ..features.reordering import beats_source_order, oracle_xl_positions
    from ..training.reorderer import does_not_beat_line

    split = read_parallel_files(args.source, args.target, args.alignments)
    words = [line.split() for line in split.sources]
    links = split.alignments
    if links is None:
        context = read_parallel_files(args.context_source, args.context_target) if args.context_source else None
        sources = split.sources + (context.sources if context else [])
        targets = split.targets + (context.targets if context else [])
        logger.info("aligning %d pairs with eflomal (%d of them context)", len(sources), len(sources) - len(words))
        links = align_with_eflomal(sources, targets, runs=args.alignment_runs)[: len(words)]
    oracle = [oracle_xl_positions(sorted(zip(link[0::2], link[1::2])), len(w)) for link, w in zip(links, words)]
    monotone = [list(range(len(w))) for w in words]
    if args.orders:
        predicted, name = read_orders(args.orders, [len(w) for w in words]), Path(args.orders).name
    else:
        model, tokenizer = _load_reorderer(args.reorderer, args.order_prior)
        predicted, _ = predict_word_positions(model, tokenizer, split.sources, args.batch_size, args.long_lines)
        name = "reorderer"
    result = {
        "level": "whitespace words; sentences of 2+ words",
        "oracle": args.alignments or "eflomal",
        name: reordering_quality(predicted, oracle, min_items=2),
        "monotone": reordering_quality(monotone, oracle, min_items=2),
    }
    scored, monotone = result[name], result["monotone"]
    beats = beats_source_order(scored["kendall_tau"], monotone["kendall_tau"])
    result["beats_source_order"] = bool(beats) if scored["sentences"] else None
    rows = [(key, value) for key, value in result.items() if isinstance(value, dict)]
    table = ["| order | Kendall tau | FRS | exact match | sentences |", "|---|---|---|---|---|"]
    table += [
        f"| {key} | {v['kendall_tau']:.3f} | {v['fuzzy_reordering_score']:.3f} | "
        f"{v['exact_match']:.3f} | {v['sentences']} |"
        for key, v in rows
    ]
    print("\n".join(table), file=sys.stderr)
    line = does_not_beat_line(
        scored["kendall_tau"],
        monotone["kendall_tau"],
        scored["sentences"],
        what="the reorderer" if name == "reorderer" else name,
        scored=f"sentences of {args.source}",
    )
    if line and scored["sentences"]:
        print(f"xlpe-reorder evaluate: {line}", file=sys.stderr)
    return result


# ---------------------------------------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------------------------------------


def epochs_value(text: str) -> float | None:
    """`--epochs N` (a number) or `--epochs auto` (None: chosen from the measured step time)."""
    if text == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    description, commands = __doc__.split("\n\n")[:2]
    parser = argparse.ArgumentParser(
        prog="xlpe-reorder",
        description=description,
        epilog=commands,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    defaults_shown = argparse.ArgumentDefaultsHelpFormatter  # (the epochs, sizes and rates a run gets unless given)
    train = sub.add_parser("train", help="train a reorderer on parallel text", formatter_class=defaults_shown)
    add_flag(train, "--source", help="source-side text, one sentence of whitespace words per line", facts=DIGEST)
    add_flag(train, "--target", help="target-side text, parallel to --source", facts=DIGEST)
    add_flag(
        train,
        "--prepared",
        help="instead of --source/--target: an xlpe-prepare output; trains on its train "
        "split's oracle orders, made from the alignments xlpe-prepare computed "
        "(nothing is aligned again), with its tokenizer (DIR/tokenizer, or "
        "--tokenizer when it is the same one)",
        facts=DIGEST,
    )
    add_flag(train, "--alignments", help="Pharaoh i-j file parallel to --source (default: run eflomal)", facts=DIGEST)
    add_flag(
        train,
        "--output_dir",
        "--output-dir",
        required=True,
        help="where the reorderer and checkpoints go",
        facts=PLUMBING,
    )
    add_flag(
        train,
        "--tokenizer",
        help="tokenizer to read ids with (the XL PE model's, to ship it inside that "
        "model); default: train a joint one, saved in --output_dir",
        facts=DIGEST,
    )
    add_flag(train, "--vocab-size", type=int, default=8000, help="pieces of the trained tokenizer", facts=PART)
    add_flag(train, "--tokenizer-model", default="unigram", choices=("unigram", "bpe"), facts=PART)
    add_flag(train, "--alignment-runs", type=int, default=1, metavar="K", help="eflomal runs voted over", facts=PART)
    add_flag(
        train, "--max-length", type=int, default=256, help="longest kept pair in tokens (longer: skipped, counted)"
    )
    add_flag(train, "--decoder", default="btg", choices=("btg", "rank"), help="btg: exact CKY (default); rank")
    add_flag(train, "--pair-scorer", default="biaffine", choices=("biaffine", "mlp"))
    add_flag(train, "--cache-dir", help="reuse identical earlier preparations from here", facts=PLUMBING)
    add_flag(
        train,
        "--no-resume",
        action="store_true",
        help="start this run afresh (same data and options) even "
        "if --output_dir has its checkpoints or its finished reorderer",
        facts=PLUMBING,
    )
    add_flag(
        train,
        "--overwrite_output",
        action="store_true",
        help="train afresh in place of a finished reorderer "
        "in --output_dir or of one made from other data or options (default: the finished one is "
        "reused, another is a one-line error naming the difference)",
        facts=PLUMBING,
    )
    add_flag(
        train,
        "--calibration-pairs",
        type=int,
        default=500,
        metavar="N",
        help="pairs held out (at most a tenth) to choose the decoding prior for the source order by "
        "word-level Kendall tau; 0: no calibration, order prior 0",
    )

    predict = sub.add_parser("predict", help="predict word orders for raw text")
    predict.add_argument("--reorderer", required=True, help="directory written by `xlpe-reorder train`")
    predict.add_argument("--input", required=True, help="text file, one sentence of whitespace words per line")
    predict.add_argument("--output", help="order file to write (default: stdout)")

    attach = sub.add_parser("attach", help="ship a reorderer inside an XL PE checkpoint")
    attach.add_argument("--reorderer", required=True, help="directory written by `xlpe-reorder train`")
    attach.add_argument("--model", required=True, help="XL PE model directory (trained with the same tokenizer)")
    attach.add_argument(
        "--output_dir", "--output-dir", help="where to save the model with its reorderer (default: --model)"
    )

    jackknife = sub.add_parser(
        "jackknife", help="k-fold predicted positions for a prepared training split", formatter_class=defaults_shown
    )
    add_flag(jackknife, "--prepared", required=True, help="xlpe-prepare output (save_to_disk directory)", facts=DIGEST)
    add_flag(jackknife, "--tokenizer", required=True, help="the tokenizer it was prepared with", facts=DIGEST)
    add_flag(jackknife, "--folds", type=int, default=5)
    add_flag(
        jackknife,
        "--output_dir",
        "--output-dir",
        required=True,
        help="directory: data/ (the new dataset) and folds/ (a reorderer per fold; an unfinished run is resumed)",
        facts=PLUMBING,
    )
    add_flag(
        jackknife,
        "--oracle-share",
        "--oracle_share",
        facts=APPLIED,
        type=float,
        default=0.0,
        metavar="S",
        help="share of the training pairs (drawn with --seed) that keep their oracle positions: "
        "0 (default) all jackknifed; e.g. 0.5 the mixed remedy",
    )
    add_flag(
        jackknife,
        "--overwrite_output",
        action="store_true",
        help="replace a finished --output_dir (one "
        "with data/) or an unfinished one made from other data or options: its folds are trained "
        "afresh (an unfinished one made alike is resumed)",
        facts=PLUMBING,
    )
    add_flag(
        train,
        "--epochs",
        type=epochs_value,
        default="auto",
        help="passes over the training pairs (the progress bar shows the steps they make); auto: as many whole "
        "ones (1 to 3) as fit 10 minutes of training, from the step time measured on a few batches (the choice is "
        "printed and recorded: a resume keeps it)",
    )
    add_flag(
        jackknife,
        "--epochs",
        type=float,
        default=3.0,
        help="passes over each fold's training pairs (the progress bar shows the steps they make)",
    )
    for command in (train, jackknife):
        add_flag(command, "--batch-size", type=int, default=64, help="sentence pairs a step")
        add_flag(command, "--learning-rate", type=float, default=1e-3, help="peak learning rate")
        add_flag(command, "--d-model", type=int, default=256, help="width of the token and word encoders")
        add_flag(command, "--token-layers", type=int, default=3, help="Transformer layers over the sub-words")
        add_flag(command, "--word-layers", type=int, default=1, help="Transformer layers over the words")
        add_flag(command, "--seed", type=int, default=1, help="seed of the initialisation, batches and held-out pairs")
        add_flag(
            command,
            "--training-loss",
            default=None,
            choices=TRAINING_LOSSES,
            help="btg_crf (default; pairwise with --decoder rank): likelihood of the oracle among all "
            "BTG permutations; pairwise: local BCE per word pair (0.3's); pairwise+btg_crf: both",
        )

    evaluate = sub.add_parser("evaluate", help="score orders against the oracle from word alignments")
    evaluate.add_argument("--reorderer", help="directory written by `xlpe-reorder train`")
    evaluate.add_argument("--orders", help="instead of --reorderer: an order file to score (as `predict` writes)")
    evaluate.add_argument("--source", required=True)
    evaluate.add_argument("--target", required=True)
    evaluate.add_argument("--alignments", help="Pharaoh i-j file parallel to --source (default: run eflomal)")
    evaluate.add_argument(
        "--context-source",
        help="more pairs aligned together with the test pairs (e.g. the "
        "training corpus): eflomal is poor on a few hundred pairs alone",
    )
    evaluate.add_argument("--context-target")
    evaluate.add_argument("--alignment-runs", type=int, default=1, metavar="K")
    evaluate.add_argument("--output", help="also write the JSON here")
    for command in (predict, evaluate):
        command.add_argument("--overwrite_output", action="store_true", help="replace an existing --output file")
    for command in (predict, evaluate):
        command.add_argument(
            "--order-prior",
            type=float,
            default=None,
            metavar="BETA",
            help="decode with this log-odds bonus for keeping each word pair in source order "
            "(trades Kendall tau for FRS / exact match; default: the reorderer's, 0)",
        )
        command.add_argument("--batch-size", type=int, default=128)
        command.add_argument(
            "--long-lines",
            default="error",
            choices=("error", "monotone"),
            help="a line over the reorderer's limit: error (default, names the line) or keep its order",
        )
    return canonical_flags(parser)


# each subcommand's inputs (flags, by attribute name): no output may be, hold or lie inside one of them
INPUT_FLAGS = {
    "train": ("source", "target", "alignments", "prepared", "tokenizer"),
    "predict": ("reorderer", "input"),
    "attach": ("reorderer",),
    "jackknife": ("prepared", "tokenizer"),
    "evaluate": ("reorderer", "orders", "source", "target", "alignments", "context_source", "context_target"),
}


def _check_outputs(args) -> None:
    """The write rule (`xlpe.features.outputs.check_destination`) for the subcommand's output, before any work:
    never over an input, even with --overwrite_output; a directory where a file goes (or the reverse) and an
    unwritable place refused. Directories that train and jackknife resume are checked for their kind there."""
    from ..features.outputs import check_destination

    inputs = {f"--{name.replace('_', '-')}": getattr(args, name, None) for name in INPUT_FLAGS.get(args.command, ())}
    overwrite = getattr(args, "overwrite_output", False)
    if args.command in ("predict", "evaluate") and args.output:
        check_destination(args.output, "--output", inputs, overwrite=overwrite)
    elif args.command in ("train", "jackknife"):
        owns = ("reorderer", "model") if args.command == "train" else ()
        check_destination(
            args.output_dir,
            "--output_dir",
            inputs,
            overwrite=overwrite,
            kind="dir",
            owns=owns,
            exists_ok=True,
            refuse_other=False,
            create_parents=True,
        )
    elif args.command == "attach" and args.output_dir:  # default: into --model itself (the command's purpose)
        if Path(args.output_dir).resolve() != Path(args.model).resolve():
            inputs["--model"] = args.model
        check_destination(
            args.output_dir, "--output_dir", inputs, overwrite=True, kind="dir", owns=("model",), create_parents=True
        )


def check_arguments(args) -> str | None:
    """The first user error in the arguments (before any work), as one line, or None."""
    if args.command == "train":
        if bool(args.prepared) == bool(args.source or args.target):
            return "train: give --source and --target (text), or --prepared (an xlpe-prepare output), not both"
        if not args.prepared and not (args.source and args.target):
            return "train: --source and --target go together"
        if args.prepared and args.alignments:
            return (
                "train: --prepared brings its alignments (its oracle orders); --alignments goes with --source/--target"
            )
        if args.prepared and not Path(args.prepared).is_dir():
            return f"train: --prepared {args.prepared}: no such directory (an xlpe-prepare --output)"
    if args.command == "evaluate" and bool(args.reorderer) == bool(args.orders):
        return "evaluate: give exactly one of --reorderer and --orders"
    if args.command == "evaluate" and bool(args.context_source) != bool(args.context_target):
        return "evaluate: --context-source and --context-target go together"
    positive = {
        "train": ("alignment_runs", "batch_size", "max_length", "vocab_size", "d_model", "token_layers"),
        "jackknife": ("batch_size", "d_model", "token_layers"),
        "predict": ("batch_size",),
        "evaluate": ("alignment_runs", "batch_size"),
    }.get(args.command, ())
    for name in positive:
        if getattr(args, name) < 1:
            return f"{args.command}: --{name} must be >= 1, got {getattr(args, name)}"
    if args.command == "train" and args.calibration_pairs < 0:
        return f"train: --calibration_pairs must be >= 0, got {args.calibration_pairs}"
    bad_epochs = args.command in ("train", "jackknife") and args.epochs is not None and args.epochs <= 0
    if bad_epochs or (args.command in ("train", "jackknife") and args.learning_rate <= 0):
        return f"{args.command}: --epochs and --learning_rate must be > 0, got {args.epochs} and {args.learning_rate}"
    if args.command == "jackknife" and args.folds < 2:
        return "jackknife: --folds must be >= 2"
    if args.command == "jackknife" and not 0.0 <= args.oracle_share <= 1.0:
        return f"jackknife: --oracle-share must be in [0, 1], got {args.oracle_share}"
    try:
        _check_outputs(args)
    except ValueError as error:
        return f"{args.command}: {error}"
    if args.command == "jackknife":
        output = Path(args.output_dir)
        if output.exists() and not output.is_dir():
            return f"jackknife: --output_dir {output}: is a file, expected a directory"
        if output.is_dir():  # a finished jackknife has data/; an unfinished one (folds/ only) is resumed
            try:
                check_output(output / "data", "--output_dir", args.overwrite_output)
            except ValueError as error:
                return f"jackknife: {error}"
    return None


INTERRUPTED_STATUS = 130  # = xlpe.training.interrupts.INTERRUPTED_STATUS (128 + SIGINT; not imported: --help)


def interrupted_message(args) -> str:
    """The one line of a Ctrl-C: for `train`, the step reached and the newest checkpoint in --output_dir (a rerun
    of the same command resumes from it) or that nothing was saved; for `jackknife`, that its folds are resumed;
    else that nothing was written."""
    command = f"xlpe-reorder {args.command}"
    if args.command == "train":
        from ..training.interrupts import interrupted_line

        return interrupted_line(
            command,
            getattr(args, "interrupt_watch", None),
            args.output_dir,
            resume="rerun the same command to resume from it",
            nothing_saved=f"no checkpoint or model saved in {args.output_dir} (a checkpoint is written at the end "
            "of each epoch); a rerun starts over, with the same or new options",
        )
    if args.command == "jackknife":
        return (
            f"{command}: interrupted; its folds' checkpoints stay in {Path(args.output_dir) / 'folds'} (rerun the "
            "same command to resume them)"
        )
    return f"{command}: interrupted" + ("; no --output written" if getattr(args, "output", None) else "")


@console_script("xlpe-reorder")
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    problem = check_arguments(args)
    if problem:
        parser.exit(user_error("xlpe-reorder", problem))
    if args.command != "train":  # one line per error on stderr: no weight-loading bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    run = {
        "train": run_train,
        "predict": run_predict,
        "attach": run_attach,
        "jackknife": run_jackknife,
        "evaluate": run_evaluate,
    }[args.command]
    if args.command == "train":
        from ..training.interrupts import InterruptWatch

        args.interrupt_watch = InterruptWatch()
    try:
        result = run(args)
    except (ValueError, FileNotFoundError, AlignmentFormatError, OSError) as error:
        parser.exit(2, f"xlpe-reorder {args.command}: error: {' '.join(str(error).split())}\n")
    except KeyboardInterrupt:  # Ctrl-C: one line (where it stopped, what was saved), no traceback
        parser.exit(INTERRUPTED_STATUS, interrupted_message(args) + "\n")
    if args.command != "predict":
        text = json.dumps(result, indent=2, ensure_ascii=False)
        print(text)
        if getattr(args, "output", None):
            try:
                write_text_atomic(args.output, text + "\n")  # a full disk: one line, the partial file removed
            except OSError as error:
                parser.exit(2, f"xlpe-reorder {args.command}: error: --output {error}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
