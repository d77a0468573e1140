"""Corpus-scale preparation: a corpus too large for one pass in memory, or for one machine, prepared in shards.

    plan    one job     scan the parallel files in one streaming pass each (line counts, SHA-256, the byte offset
                        of every shard's first line); train the joint tokenizer on a sample of the training pairs
                        (or save the one given); align: a corpus within the alignment sample is aligned whole here
                        (Pharaoh files the shards read), a larger one gets eflomal priors learned from one alignment
                        of a sample (`alignment.alignment_priors`); write `plan.json` last, so a plan on disk is whole
    shards  any jobs    shard k reads only its line range, checked against the plan's digest of it (a file edited
                        since planning is refused), and runs the in-memory pipeline on it
                        (`prepare._prepare_splits`: filter, links from the plan or eflomal with the priors at the
                        whole corpus's iteration counts, features); its dataset and report go to shards/<k>/ with
                        checksums and a record of its plan and lines, written aside and renamed into place: a killed
                        job leaves no half shard; a finished shard is verified and kept, a damaged one made anew
    merge   one job     every shard and input file verified, each split's shards concatenated in line order, the
                        shard reports merged (`merge_reports`), written as `save_prepared` writes an unsharded
                        preparation

    WORK/plan.json  WORK/tokenizer/  WORK/alignment_priors.txt | WORK/alignments.<split>.txt
    WORK/shards/00000/{data/, report.json, checksum.json}

Jobs share nothing but the work directory, so shards run in any order, on any machines that see it (a Slurm array:
`examples/slurm/prepare_array.sbatch`), and a run that was killed resumes where it stopped: the same request finds
the plan and the finished shards and does the rest (a different request, or input files whose content changed, is
refused, naming what differs; --overwrite-work-dir plans anew). WORK/xlpe_artefact.json records what made the plan
(artefacts.py).
Memory is bounded by one shard (plus the samples in the plan stage), whatever the corpus size.

Same dataset, however it is run: shard k's features depend only on its lines, the plan's tokenizer and priors and
the options (the noise attack is seeded by the absolute line number), so one process, a resumed run and a
shard-parallel run give identical datasets given the same alignments, or with a seeded eflomal
(`eflomal_options={"seed": N}`, eflomal_seed.py). Unseeded, a shard aligned again is a new sample from the same
model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from .alignment import (
    PriorsAligner,
    align_with_eflomal_flat,
    alignment_priors_flat,
    eflomal_links,
    format_pharaoh_flat,
    parse_pharaoh_line,
)
from .artefacts import (
    RECORD_NAME,
    ArtefactMismatch,
    ArtefactRecord,
    differences,
    digest,
    file_digest,
    lines_digest,
    read_record,
    verify_artefact,
    write_record,
)
from .cache import CHECKSUM_FILE, retire_directory, verify_entry, write_checksum
from .corpus import ParallelSplit, filter_pairs
from .example_features import PREPARATION_VERSION, PrepareOptions
from .text_files import read_text_line_range, scan_text_file, staging_dir, write_text_atomic
from .tokenization import tokenizer_fingerprint

PLAN_FILE, PRIORS_FILE, TOKENIZER_DIR, SHARDS_DIR = "plan.json", "alignment_priors.txt", "tokenizer", "shards"
PLAN_VERSION = 2  # 2: per-shard input digests, the work directory's artefact record, shard records
PLAN_KIND, SHARD_KIND = "xlpe-prepare plan", "xlpe-prepare shard"
REPLAN = "--overwrite-work-dir (with --stage plan or all)"  # the override of a work directory's checks
DEFAULT_SHARD_SIZE = 100_000  # pairs per shard: ~1 GB peak on 2 cores, minutes of work
DEFAULT_ALIGNMENT_SAMPLE = 200_000  # pairs aligned once: the whole of a smaller corpus, else a sample for the priors
DEFAULT_TOKENIZER_SAMPLE = 200_000  # training pairs a tokenizer trained here sees (held-out compression as with 500k)
# eflomal settings of the shards aligned from priors (over `eflomal_options`): 2 samplers and 0.6x eflomal's sweeps
# for the corpus size ((2, 1, 3) at 1M pairs): half the shards' alignment CPU; link agreement with a whole-corpus
# alignment and the oracle's statistics in docs/benchmarks/corpus_scale.md (third round). `{}` keeps eflomal's own.
DEFAULT_SHARD_EFLOMAL_OPTIONS = {"n_samplers": 2, "rel_iterations": 0.6}
SIDES = ("source", "target", "alignments")

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------
# Plan: scan, tokenizer, priors
# ----------------------------------------------------------------------------------------------------------


def _scan_split(files: dict[str, str | None], shard_size: int) -> dict:
    scans = {side: scan_text_file(path, shard_size) for side, path in files.items() if path}
    counts = {side: scan.lines for side, scan in scans.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(
            "parallel files differ in line count: " + ", ".join(f"{files[s]} has {n} lines" for s, n in counts.items())
        )
    split = {
        "lines": counts["source"],
        **{side: str(files.get(side)) if files.get(side) else None for side in SIDES},
        "sha256": {side: scan.sha256 for side, scan in scans.items()},
        "offsets": {side: scan.line_offsets for side, scan in scans.items()},
    }
    split["shard_digests"] = {side: _range_digests(split, side, shard_size) for side in scans}
    return split


def _range_digests(split: dict, side: str, shard_size: int) -> list[str]:
    """`lines_digest` of every shard's line range of one side: what a shard job checks the lines it reads against
    (a file edited after planning is refused, not paired with the plan's alignments and tokenizer)."""
    return [
        lines_digest(_read_lines(split, side, start, min(start + shard_size, split["lines"]), shard_size))
        for start in range(0, split["lines"], shard_size)
    ]


def _read_lines(split: dict, side: str, start: int, stop: int, shard_size: int) -> list[str]:
    offsets = split["offsets"][side]
    block = start // shard_size
    return read_text_line_range(split[side], start, stop, offsets[block] if block < len(offsets) else None)


def _read_sample(split: dict, indices: np.ndarray, shard_size: int, sides=("source", "target")) -> dict[str, list[str]]:
    """The lines at sorted `indices` of each side, read one shard range at a time (bounded memory)."""
    sample = {side: [] for side in sides}
    for start in range(0, split["lines"], shard_size):
        wanted = indices[(indices >= start) & (indices < start + shard_size)] - start
        if len(wanted):
            for side in sides:
                lines = _read_lines(split, side, start, min(start + shard_size, split["lines"]), shard_size)
                sample[side] += [lines[k] for k in wanted.tolist()]
    return sample


def _sample_indices(total: int, size: int, seed: int) -> np.ndarray:
    """All of 0..total-1 when size >= total, else a sorted uniform sample of `size` of them (seeded)."""
    if size >= total:
        return np.arange(total)
    return np.sort(np.random.default_rng([seed, total]).choice(total, size, replace=False))


def _plan_tokenizer(work: Path, plan: dict, tokenizer, tokenizer_options: dict, sample_size: int, cache_dir) -> None:
    from .prepare import train_tokenizer_for_splits

    if tokenizer is None:
        train = plan["splits"]["train"]
        indices = _sample_indices(train["lines"], sample_size, plan["request"]["seed"])
        sample = _read_sample(train, indices, plan["shard_size"])
        logger.info("xlpe-prepare: training the tokenizer on %d of %d training pairs", len(indices), train["lines"])
        split = ParallelSplit(sample["source"], sample["target"], train["source"], train["target"])
        tokenizer = train_tokenizer_for_splits({"train": split}, cache_dir=cache_dir, **tokenizer_options)
        plan["tokenizer"] = {"trained_on_pairs": len(indices), **tokenizer_options}
    tokenizer.save_pretrained(str(work / TOKENIZER_DIR))
    plan["tokenizer"] = {**plan.get("tokenizer", {"given": True}), "fingerprint": tokenizer_fingerprint(tokenizer)}


def _plan_alignment(work: Path, plan: dict, options: PrepareOptions, sample_size: int) -> None:
    """Pairs with no alignment file: a corpus within `sample_size` pairs is aligned here in one eflomal run (the
    whole-corpus alignment, written as Pharaoh files the shards read); a larger one gets eflomal priors learned from
    one run on a uniform sample, which every shard starts from."""
    to_align = [name for name, split in plan["splits"].items() if not split["alignments"]]
    total = sum(plan["splits"][name]["lines"] for name in to_align)
    plan["priors"] = None
    if not to_align or not options.needs_links or total == 0:
        return
    started, sources, targets, owners = time.perf_counter(), [], [], []
    for name in to_align:  # a sample spreads over the splits in proportion to their size
        split = plan["splits"][name]
        share = split["lines"] if total <= sample_size else max(1, round(sample_size * split["lines"] / total))
        indices = _sample_indices(split["lines"], share, plan["request"]["seed"])
        sample = _read_sample(split, indices, plan["shard_size"])
        sources += sample["source"]
        targets += sample["target"]
        owners += [(name, int(k)) for k in indices]
    keep, _ = filter_pairs(ParallelSplit(sources, targets, "", ""), options.max_length, options.target_limit)
    kept_sources, kept_targets = [sources[k] for k in keep], [targets[k] for k in keep]
    whole = total <= sample_size
    logger.info("xlpe-prepare: aligning %d %s pairs (eflomal forward + reverse)", len(keep), "" if whole else "sampled")
    if whole:  # the whole corpus: its links are the shards' alignments, exactly as an unsharded preparation's
        sentence, pairs = align_with_eflomal_flat(
            kept_sources,
            kept_targets,
            options.symmetrization,
            options.alignment_runs,
            **(options.eflomal_options or {}),
        )
        per_line = dict(zip((owners[k] for k in keep), format_pharaoh_flat(sentence, pairs, len(keep))))
        for name in to_align:
            path = work / f"alignments.{name}.txt"
            lines = [per_line.get((name, k), "") for k in range(plan["splits"][name]["lines"])]
            write_text_atomic(path, "\n".join(lines) + "\n" if lines else "")
            split = plan["splits"][name]
            split["alignments"], split["alignment_origin"] = (
                str(path),
                f"eflomal ({options.symmetrization}), whole corpus",
            )
            split["offsets"]["alignments"] = scan_text_file(path, plan["shard_size"]).line_offsets
            split["shard_digests"]["alignments"] = _range_digests(split, "alignments", plan["shard_size"])
        plan["aligned_whole"] = {"pairs": len(keep), "seconds": round(time.perf_counter() - started, 1)}
        return
    forward, reverse = eflomal_links(kept_sources, kept_targets, **(options.eflomal_options or {}))
    write_text_atomic(work / PRIORS_FILE, alignment_priors_flat(kept_sources, kept_targets, forward, reverse))
    plan["priors"] = {
        "file": PRIORS_FILE,
        "sha256": file_digest(work / PRIORS_FILE),
        "sample_pairs": len(keep),
        "corpus_pairs": total,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _request(scanned: dict, options: dict, shard_size: int, samples: dict, tokenizer, tokenizer_options) -> dict:
    """What defines a sharded preparation: inputs by content, options, shard size, samples, tokenizer."""
    return {
        "plan_version": PLAN_VERSION,
        "xlpe_prepare_version": PREPARATION_VERSION,
        "shard_size": shard_size,
        "inputs": {name: {"lines": s["lines"], "sha256": s["sha256"]} for name, s in scanned.items()},
        "options": options,
        "samples": samples,
        "seed": options.get("seed", 0),
        "tokenizer": tokenizer_fingerprint(tokenizer) if tokenizer is not None else {"train": tokenizer_options},
    }


def _plan_record(request: dict) -> ArtefactRecord:
    """The work directory's artefact record: the inputs by content ("<split> <side>": SHA-256 of the decompressed
    bytes) and every option of the request (plan format, shard size, samples, tokenizer, preparation options)."""
    inputs = {
        f"{name} {side}": sha for name, split in request["inputs"].items() for side, sha in split["sha256"].items()
    }
    options = {
        **request["options"],
        "plan_version": request["plan_version"],
        "shard_size": request["shard_size"],
        "samples": request["samples"],
        "tokenizer": request["tokenizer"],
        "xlpe_prepare_version": request["xlpe_prepare_version"],
    }
    return ArtefactRecord(kind=PLAN_KIND, inputs=inputs, options=options)


def _input_path(plan_or_files: dict, fact: str) -> str:
    """The file behind an input fact ("input train source") of a plan's splits or a files dict."""
    split, side = fact.split(" ", 1)[1].rsplit(" ", 1)
    return str((plan_or_files.get(split) or {}).get(side) or fact)


def _verify_plan_inputs(work: Path, expected: ArtefactRecord, files: dict) -> None:
    """The plan stage found a plan in `work`: its record must match this request (inputs by content, options)."""
    try:
        verify_artefact(work, expected, override=REPLAN, what=f"work directory {work}")
    except ArtefactMismatch as error:
        if not error.fact.startswith("input "):
            raise
        old = read_record(work).inputs.get(error.fact.split(" ", 1)[1])
        new = expected.inputs.get(error.fact.split(" ", 1)[1])
        raise ArtefactMismatch(
            f"{_input_path(files, error.fact)}: changed since the plan in {work} was made from it "
            f"(SHA-256 {str(old)[:12]}, now {str(new)[:12]}); pass {REPLAN}, or restore the file",
            error.path,
            error.fact,
        ) from None


def plan_preparation(
    work_dir,
    files: dict[str, dict[str, str | None]],
    *,
    tokenizer=None,
    tokenizer_options=None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    alignment_sample: int = DEFAULT_ALIGNMENT_SAMPLE,
    tokenizer_sample: int = DEFAULT_TOKENIZER_SAMPLE,
    cache_dir=None,
    overwrite_work_dir: bool = False,
    **options,
) -> dict:
    """Plan a sharded preparation in `work_dir`, or find the identical plan there (resume). Returns the plan.

    Args:
        files: {split: {"source": path, "target": path, "alignments": Pharaoh path or None}}; a "train" split is
            needed when no tokenizer is given.
        tokenizer: the tokenizer to use; None trains a joint one (`tokenizer_options`: vocab_size, model,
            model_max_length) on up to `tokenizer_sample` training pairs (a seeded uniform sample).
        shard_size: pairs per shard. alignment_sample: a corpus within it is aligned whole in the plan; a larger
            one gets eflomal priors learned from a sample of this many pairs.
        options: `prepare_dataset`'s options (features, symmetrization, max_length, num_proc, ...); the aligner is
            eflomal (with priors) or the given alignment files. `shard_eflomal_options` (also here): eflomal.Aligner
            arguments for the shards aligned from priors only, over `eflomal_options`; None (default):
            `DEFAULT_SHARD_EFLOMAL_OPTIONS`, {}: eflomal's own settings (docs/benchmarks/corpus_scale.md).
    A work directory holding a plan of another request (other options, or input files whose content changed) is
    an ArtefactMismatch (a ValueError) naming what differs; `overwrite_work_dir` removes it and plans anew."""
    for name, value in (
        ("shard_size", shard_size),
        ("alignment_sample", alignment_sample),
        ("tokenizer_sample", tokenizer_sample),
    ):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if "aligner" in options and options["aligner"] != "eflomal":
        raise ValueError(
            "a sharded preparation aligns with eflomal or reads alignment files; a custom aligner "
            "cannot travel to other jobs: give its links as --alignments files"
        )
    shard_eflomal_options = _check_shard_eflomal_options(
        options.pop("shard_eflomal_options", None), options.get("eflomal_options")
    )
    prepare_options = PrepareOptions(**options)  # validates them
    tokenizer_options = dict(tokenizer_options or {})
    if tokenizer is None and "train" not in files:
        raise ValueError(f"a tokenizer is trained on the 'train' split, and there is none (splits: {sorted(files)})")
    work, started = Path(work_dir), time.perf_counter()
    scanned = {name: _scan_split(split_files, shard_size) for name, split_files in files.items()}
    timings = {"scan": round(time.perf_counter() - started, 3)}
    samples = {"alignment": alignment_sample, "tokenizer": tokenizer_sample}
    request = _request(
        scanned,
        _request_options({**options, "shard_eflomal_options": shard_eflomal_options}),
        shard_size,
        samples,
        tokenizer,
        tokenizer_options,
    )
    expected = _plan_record(request)
    if overwrite_work_dir and work.exists():
        _remove_work_dir(work)
    if (work / PLAN_FILE).exists():
        plan = load_plan(work)
        _verify_plan_inputs(work, expected, files)
        logger.info(
            "xlpe-prepare: resuming the plan in %s (%d of %d shards done)",
            work,
            len(finished_shards(work, plan)),
            len(plan["shards"]),
        )
        return plan
    work.mkdir(parents=True, exist_ok=True)
    shards = [
        {"index": 0, "split": name, "start": start, "stop": min(start + shard_size, split["lines"])}
        for name, split in scanned.items()
        for start in range(0, split["lines"], shard_size)
    ]
    for index, shard in enumerate(shards):
        shard["index"] = index
    plan = {
        "request": request,
        "shard_size": shard_size,
        "splits": scanned,
        "shards": shards,
        "options": {**options, "cache_dir": None},
        "shard_eflomal_options": shard_eflomal_options,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }

    def timed(stage, run):
        stage_started = time.perf_counter()
        run()
        timings[stage] = round(time.perf_counter() - stage_started, 3)

    # The two are independent: eflomal (a subprocess, two or more threads) aligns in a background thread while
    # the tokenizer trains here (the Unigram trainer is mostly one core), so on 2 cores they overlap.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="xlpe-plan-align") as pool:
        alignment = pool.submit(
            timed, "alignment", lambda: _plan_alignment(work, plan, prepare_options, alignment_sample)
        )
        try:
            timed(
                "tokenizer",
                lambda: _plan_tokenizer(work, plan, tokenizer, tokenizer_options, tokenizer_sample, cache_dir),
            )
        except BaseException:
            alignment.cancel()
            wait([alignment])  # the tokenizer's error is the one raised
            raise
        alignment.result()  # raises what the alignment raised
    timings["plan"] = round(time.perf_counter() - started, 3)
    plan["timings_s"] = timings
    write_record(work, expected)  # before the plan: a plan on disk has its record
    write_text_atomic(work / PLAN_FILE, json.dumps(plan, indent=1, default=str))  # last: a plan on disk is whole
    logger.info("xlpe-prepare: planned %d shards of up to %d pairs in %s", len(shards), shard_size, work)
    return plan


def _request_options(options: dict) -> dict:
    """The options that change the prepared data (not how many processes compute it), as plan.json stores them
    (no shard_eflomal_options when there are none: plans written before that option stay valid)."""
    kept = {key: value for key, value in sorted(options.items()) if key not in ("num_proc", "batch_size", "cache_dir")}
    if not kept.get("shard_eflomal_options"):
        kept.pop("shard_eflomal_options", None)
    return json.loads(json.dumps(kept, default=str))


def _check_shard_eflomal_options(shard_options, eflomal_options) -> dict:
    """`shard_eflomal_options` as a dict (eflomal.Aligner arguments for the shards aligned from priors, over
    `eflomal_options`; None: `DEFAULT_SHARD_EFLOMAL_OPTIONS`), or a ValueError naming what eflomal does not take."""
    if shard_options is None:
        return dict(DEFAULT_SHARD_EFLOMAL_OPTIONS)
    if not isinstance(shard_options, dict):
        raise ValueError(
            f"shard_eflomal_options must be a JSON object of eflomal.Aligner arguments, got {shard_options!r}"
        )
    import eflomal

    try:
        eflomal.Aligner(
            **{k: v for k, v in {**(eflomal_options or {}), **shard_options}.items() if k != "seed"}
        )  # seed: ours
    except TypeError as error:
        raise ValueError(f"shard_eflomal_options {json.dumps(shard_options)}: {error}") from None
    return dict(shard_options)


def _remove_work_dir(work: Path) -> None:
    """--overwrite-work-dir: the work directory goes (renamed aside first, so a half-removed one is never reused).
    A directory that holds files but nothing of a preparation is refused (a mistyped --work-dir)."""
    ours = any((work / name).exists() for name in (PLAN_FILE, RECORD_NAME, SHARDS_DIR, TOKENIZER_DIR))
    if not ours and any(work.iterdir()):
        raise ValueError(
            f"--work-dir {work}: holds files but no xlpe-prepare work; not removing it (choose another --work-dir)"
        )
    if not retire_directory(work, "replaced"):
        raise ValueError(f"--work-dir {work}: could not be moved aside to be replaced")


_PLAN_KEYS = {"request": dict, "shard_size": int, "splits": dict, "shards": list, "options": dict}


def _read_plan(work: Path) -> dict:
    """plan.json, checked: valid JSON (else file:line), the keys a plan has, this plan version, and the work
    directory's record made from the same request (a plan.json edited or copied in is refused)."""
    path = work / PLAN_FILE
    if not path.is_file():
        raise ValueError(f"--work-dir {work}: no {PLAN_FILE} (run the plan stage first: --stage plan)")
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not a valid plan ({error.msg}); pass {REPLAN}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text, not a plan; pass {REPLAN}") from None
    wrong = [
        key for key, kind in _PLAN_KEYS.items() if not isinstance(plan, dict) or not isinstance(plan.get(key), kind)
    ]
    if wrong:
        raise ValueError(f"{path}: not a plan written by xlpe-prepare (no valid {', '.join(wrong)}); pass {REPLAN}")
    version = plan["request"].get("plan_version")
    if version != PLAN_VERSION:
        raise ValueError(
            f"{path}: a plan of another xlpe version (plan version {version}, now {PLAN_VERSION}); pass {REPLAN}"
        )
    try:
        verify_artefact(work, _plan_record(plan["request"]), override=REPLAN, what=f"work directory {work}")
    except ArtefactMismatch as error:
        if error.fact == "record":  # none, or a damaged one: its own message names it
            raise
        raise ArtefactMismatch(
            f"{path} does not match the record of what made {work} ({error.fact}: edited, or copied "
            f"from another work directory); pass {REPLAN}",
            error.path,
            error.fact,
        ) from None
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a plan written by xlpe-prepare (a malformed request); pass {REPLAN}") from None
    return plan


def _check_files(work: Path, plan: dict, files: dict) -> None:
    """The files a shard or merge job was given are the plan's (a job never reads other files than it was told)."""
    if sorted(files) != sorted(plan["splits"]):
        raise ValueError(
            f"--work-dir {work} was planned for the splits {', '.join(sorted(plan['splits']))}, this job was "
            f"given {', '.join(sorted(files)) or 'none'}; give every stage the same files"
        )
    for name, given in files.items():
        planned = plan["splits"][name]
        for side in SIDES:
            if side == "alignments" and planned.get("alignment_origin"):  # links aligned in the plan: none given
                continue
            want, got = planned.get(side), given.get(side)
            if (want is None) != (got is None) or (want and Path(want).resolve() != Path(got).resolve()):
                flag = f"--{'' if name == 'train' else name + '-'}{side}"
                raise ValueError(
                    f"{flag} {got}: --work-dir {work} was planned from {want}; give every stage the same "
                    f"files, or re-plan with {REPLAN}"
                )


def load_plan(work_dir, options: dict | None = None, files: dict | None = None) -> dict:
    """The plan in `work_dir`, checked (`_read_plan`: a ValueError naming the file when there is none or it is
    damaged). With `options`, an ArtefactMismatch when they differ from the plan's (a shard job started with other
    flags than the plan job); with `files` ({split: {side: path}}), a ValueError when they are not the plan's."""
    work = Path(work_dir)
    plan = _read_plan(work)
    if files is not None:
        _check_files(work, plan, files)
    if options is not None:
        shard_options = _check_shard_eflomal_options(
            options.get("shard_eflomal_options"), options.get("eflomal_options")
        )
        given = _request_options({**options, "shard_eflomal_options": shard_options})
        recorded = _plan_record(plan["request"])
        changed = differences(recorded, _plan_record({**plan["request"], "options": given}))
        if changed:
            fact, old, new = changed[0]
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            raise ArtefactMismatch(
                f"--work-dir {work} was planned with other options ({fact}: {json.dumps(old, default=str)}, "
                f"now {json.dumps(new, default=str)}{more}); give every stage the same flags, or "
                f"re-plan with {REPLAN}",
                str(work),
                fact,
            )
    return plan


# ----------------------------------------------------------------------------------------------------------
# Shards: each one a line range through the in-memory pipeline
# ----------------------------------------------------------------------------------------------------------


def _shard_dir(work: Path, index: int) -> Path:
    return work / SHARDS_DIR / f"{index:05d}"


def _shard_record(plan: dict, shard: dict) -> ArtefactRecord:
    """What made a shard: the plan (its request's digest) and its lines (the plan's digests of them)."""
    digests = plan["splits"][shard["split"]]["shard_digests"]
    block = shard["start"] // plan["shard_size"]
    return ArtefactRecord(
        kind=SHARD_KIND,
        inputs={"plan": _plan_fingerprint(plan), **{side: d[block] for side, d in digests.items()}},
        options={key: shard[key] for key in ("index", "split", "start", "stop")},
    )


def shard_problem(work_dir, plan: dict, shard: dict) -> str | None:
    """Why shard `shard` of `plan` cannot be used (not prepared yet, damaged, made for another plan), or None."""
    path = _shard_dir(Path(work_dir), shard["index"])
    if not _is_finished(path):
        return "not prepared yet"
    problem = verify_entry(path)
    if problem is not None:
        return f"damaged: {problem}"
    try:
        verify_artefact(path, _shard_record(plan, shard), override="--stage shards", what=str(path))
    except ArtefactMismatch as error:
        return f"made for another plan or lines ({error.fact})"
    return None


def _discard_shard(work: Path, index: int, problem: str) -> None:
    path = _shard_dir(work, index)
    logger.warning("xlpe-prepare: shard %d (%s) is %s: making it anew", index, path, problem)
    retire_directory(path, "discarded")  # False: another job discarded it first


def finished_shards(work_dir, plan: dict) -> set[int]:
    """Indices of the shards whose directory is in place (renamed into place only when complete)."""
    work = Path(work_dir)
    return {shard["index"] for shard in plan["shards"] if _is_finished(_shard_dir(work, shard["index"]))}


def _is_finished(path: Path) -> bool:
    return (path / CHECKSUM_FILE).is_file()  # written last, inside the staging directory renamed into place


def _load_tokenizer(work: Path, plan: dict | None = None):
    """WORK/tokenizer/, checked against the fingerprint the plan recorded (a replaced or damaged one is refused)."""
    from transformers import AutoTokenizer

    path = work / TOKENIZER_DIR
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{path}: the plan's tokenizer does not load ({' '.join(str(error).split())[:200]}); "
            f"re-plan: --stage plan {REPLAN.split(' ')[0]}"
        ) from None
    recorded = ((plan or {}).get("tokenizer") or {}).get("fingerprint")
    if recorded is not None and tokenizer_fingerprint(tokenizer) != recorded:
        raise ValueError(
            f"{path}: not the tokenizer the plan was made with (changed since); re-plan: --stage plan "
            f"{REPLAN.split(' ')[0]}"
        )
    return tokenizer


def _checked_lines(plan: dict, shard: dict, side: str) -> list[str]:
    """A shard's lines of one side, checked against the digest the plan recorded for them: a file edited since
    planning is a ValueError naming it and the lines (never paired with the plan's alignments and tokenizer)."""
    split, size, start, stop = plan["splits"][shard["split"]], plan["shard_size"], shard["start"], shard["stop"]
    try:
        lines = _read_lines(split, side, start, stop, size)
    except ValueError as error:  # fewer lines than planned, or text that no longer decodes there
        raise ValueError(
            f"{split[side]}: changed since the plan was made ({' '.join(str(error).split())}); re-plan: "
            f"--stage plan {REPLAN.split(' ')[0]}"
        ) from None
    if lines_digest(lines) != split["shard_digests"][side][start // size]:
        raise ValueError(
            f"{split[side]}: lines {start + 1}-{stop} changed since the plan was made (shard "
            f"{shard['index']}); restore the file, or re-plan: --stage plan {REPLAN.split(' ')[0]}"
        )
    return lines


def _shard_split(plan: dict, shard: dict) -> ParallelSplit:
    split, start = plan["splits"][shard["split"]], shard["start"]
    sources, targets = (_checked_lines(plan, shard, side) for side in ("source", "target"))
    result = ParallelSplit(sources, targets, split["source"], split["target"], line_offset=start)
    if split["alignments"]:
        lines = _checked_lines(plan, shard, "alignments")
        result.alignments = [
            parse_pharaoh_line(line, len(s.split()), len(t.split()), split["alignments"], start + k + 1)
            for k, (line, s, t) in enumerate(zip(lines, sources, targets))
        ]
        result.alignment_origin = split.get("alignment_origin", split["alignments"])
    return result


def _shard_options(work: Path, plan: dict) -> PrepareOptions:
    options = dict(plan["options"])
    if plan.get("priors"):
        eflomal_options = {**(options.get("eflomal_options") or {}), **(plan.get("shard_eflomal_options") or {})}
        options["aligner"] = PriorsAligner(
            work / plan["priors"]["file"],
            plan["priors"]["corpus_pairs"],
            options.get("symmetrization", "grow-diag-final-and"),
            options.get("alignment_runs", 1),
            **eflomal_options,
        )
    return PrepareOptions(**options)


def run_shard(work_dir, plan: dict, index: int, tokenizer=None, prealigned=None) -> bool:
    """Prepare shard `index` into WORK/shards/<index>/ unless it is there already. Returns True when it ran.
    Written aside and renamed into place; when another job finished the same shard meanwhile, its copy is kept.
    `prealigned`: `align_shard(work_dir, plan, index)`, when it was run already."""
    from .prepare import _prepare_splits

    work = Path(work_dir)
    _check_index(plan, index)
    final = _shard_dir(work, index)
    if _is_finished(final):
        return False
    shard = plan["shards"][index]
    tokenizer = tokenizer if tokenizer is not None else _load_tokenizer(work, plan)
    split, aligned = prealigned if prealigned is not None else align_shard(work, plan, index)
    prepared, reports = _prepare_splits({shard["split"]: split}, tokenizer, _shard_options(work, plan), aligned)
    with staging_dir(final, create_parent=True) as staging:
        prepared[shard["split"]].save_to_disk(str(staging / "data"))
        report = {**reports[shard["split"]], "shard": shard}
        (staging / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str))
        write_record(staging, _shard_record(plan, shard))
        write_checksum(staging)
        try:
            os.rename(staging, final)
        except OSError:  # finished by another job meanwhile (or an incomplete leftover): keep a whole one
            if _is_finished(final):
                shutil.rmtree(staging, ignore_errors=True)
                return False
            shutil.rmtree(final, ignore_errors=True)
            os.rename(staging, final)
    return True


def align_shard(work_dir, plan: dict, index: int) -> tuple[ParallelSplit, dict]:
    """Shard `index`'s lines and `prepare.filter_and_align` of them (the kept pairs and their links: read from the
    plan's files, or eflomal from the priors): the first half of `run_shard`."""
    from .prepare import filter_and_align

    _check_index(plan, index)
    shard = plan["shards"][index]
    split = _shard_split(plan, shard)
    if plan.get("priors"):
        priors = Path(work_dir) / plan["priors"]["file"]
        if not priors.is_file() or file_digest(priors) != plan["priors"].get("sha256"):
            raise ValueError(
                f"{priors}: missing or changed since the plan was made (the priors every shard starts from); "
                f"re-plan: --stage plan {REPLAN.split(' ')[0]}"
            )
    return split, filter_and_align({shard["split"]: split}, _shard_options(Path(work_dir), plan))


def _check_index(plan: dict, index: int) -> None:
    if not 0 <= index < len(plan["shards"]):
        raise ValueError(f"--shard-index {index}: the plan has shards 0..{len(plan['shards']) - 1}")


def run_shards(work_dir, plan: dict, indices=None, progress: bool = True, overlap: bool = False) -> list[int]:
    """Run the shards `indices` (default: every unfinished one) in order, with a progress bar in pairs (ETA);
    returns the indices that ran. Each is independent: several jobs may run disjoint (or even equal) lists.

    `overlap` (off by default: at 1M pairs it raised the measured peak from under 4 GB to 4.8 GB): shard k+1 is read and
    aligned in a background thread (eflomal is a subprocess with its own threads) while the features of shard k are
    computed and saved; the features are mostly one core of numpy and Python, so on 2 cores the second core aligns
    meanwhile (docs/benchmarks/corpus_scale.md). The datasets are the same either way; it holds two shards in
    memory instead of one."""
    import datasets
    from tqdm.auto import tqdm

    work = Path(work_dir)
    candidates = list(range(len(plan["shards"])) if indices is None else indices)
    for index in candidates:
        _check_index(plan, index)
    done = finished_shards(work, plan) & set(candidates)
    for index in sorted(done):  # a finished shard is verified: a damaged or foreign one is made anew
        problem = shard_problem(work, plan, plan["shards"][index])
        if problem is not None:
            _discard_shard(work, index, problem)
            done.discard(index)
    todo = [i for i in dict.fromkeys(candidates) if i not in done]
    tokenizer, ran = (_load_tokenizer(work, plan) if todo else None), []
    pairs = sum(plan["shards"][i]["stop"] - plan["shards"][i]["start"] for i in todo)
    bars_were_on = datasets.utils.logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # one bar for the whole run, not one per shard and stage
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xlpe-align") if overlap and len(todo) > 1 else None
    try:
        # the first shard is read (its lines checked against the plan) and aligned before the bar starts: an input
        # edited since planning is a one-line error, not one after a progress bar
        first = align_shard(work, plan, todo[0]) if todo else None
        with tqdm(total=pairs, unit="pairs", desc="xlpe-prepare shards", disable=not progress or not todo) as bar:
            pending = None
            for position, index in enumerate(todo):
                shard, started = plan["shards"][index], time.perf_counter()
                prealigned = pending.result() if pending is not None else (first if position == 0 else None)
                pending = None
                if (
                    pool is not None
                    and position + 1 < len(todo)
                    and not _is_finished(_shard_dir(work, todo[position + 1]))
                ):
                    pending = pool.submit(align_shard, work, plan, todo[position + 1])
                if run_shard(work, plan, index, tokenizer, prealigned):
                    ran.append(index)
                logger.info(
                    "xlpe-prepare: shard %d (%s lines %d-%d) done in %.1f s",
                    index,
                    shard["split"],
                    shard["start"] + 1,
                    shard["stop"],
                    time.perf_counter() - started,
                )
                bar.update(shard["stop"] - shard["start"])
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if bars_were_on:
            datasets.enable_progress_bars()
    return ran


# ----------------------------------------------------------------------------------------------------------
# Merge: shards -> the prepared directory
# ----------------------------------------------------------------------------------------------------------

_SUMMED = (
    "pairs_read",
    "pairs_kept",
    "pairs_skipped_total",
    "source_words",
    "unaligned_source_words",
    "btg_repairs",
    "kendall_tau_sentences",
)


def merge_reports(reports: list[dict]) -> dict:
    """One split's report from its shards' reports: counts summed, ratios and the mean Kendall's tau recomputed
    from the sums (tau weighted by its sentences), unknown tags summed, stage timings summed; the rest (options,
    features, origins, tag vocabularies) is the same in every shard and taken from the first."""
    merged = {key: value for key, value in reports[0].items() if key not in ("shard", "fingerprint")}
    for key in _SUMMED:
        if key in merged:
            merged[key] = sum(report[key] for report in reports)
    merged["pairs_skipped"] = dict(sum((Counter(report["pairs_skipped"]) for report in reports), Counter()))
    merged["pairs_skipped"].update(
        {k: 0 for r in reports for k in r["pairs_skipped"] if k not in merged["pairs_skipped"]}
    )
    if "unaligned_source_words" in merged:
        merged["unaligned_ratio"] = merged["unaligned_source_words"] / max(merged["source_words"], 1)
        merged["btg_repair_ratio"] = merged["btg_repairs"] / max(merged["pairs_kept"], 1)
        weighted = [
            (r["mean_kendall_tau"], r["kendall_tau_sentences"])
            for r in reports
            if r.get("mean_kendall_tau") is not None
        ]
        total = sum(n for _, n in weighted)
        merged["mean_kendall_tau"] = sum(t * n for t, n in weighted) / total if total else None
    for side, _counts in merged.get("unknown_tags", {}).items():
        tags = sum((Counter(r["unknown_tags"][side]["tags"]) for r in reports), Counter())
        merged["unknown_tags"][side] = {"count": sum(tags.values()), "tags": dict(tags)}
    merged["timings_s"] = {
        stage: round(sum(r["timings_s"].get(stage, 0.0) for r in reports), 3)
        for stage in reports[0].get("timings_s", {})
    }
    merged["shards"] = len(reports)
    return merged


def _check_input_files(plan: dict) -> None:
    """Every input file still has the content the plan was made from (one streaming pass each): the merged
    dataset is the preparation of the files as they are, or a ValueError names the one that changed."""
    for split in plan["splits"].values():
        for side, sha in split["sha256"].items():
            now = scan_text_file(split[side], plan["shard_size"]).sha256
            if now != sha:
                raise ValueError(
                    f"{split[side]}: changed since the plan was made (SHA-256 {sha[:12]}, now {now[:12]}); "
                    f"restore it, or re-plan: --stage plan {REPLAN.split(' ')[0]}"
                )


def _load_shard(work: Path, index: int):
    import datasets

    path = _shard_dir(work, index) / "data"
    try:
        return datasets.load_from_disk(str(path))
    except Exception as error:  # noqa: BLE001  (verified, yet unreadable: named, never a traceback)
        raise ValueError(
            f"{path}: the shard's dataset does not load ({type(error).__name__}: "
            f"{' '.join(str(error).split())[:200]}); run --stage shards --shard-index {index} again"
        ) from None


def merge_shards(
    work_dir, output, overwrite: bool = True, label=None, started: float | None = None, check_inputs: bool = True
):
    """Verify every shard, concatenate each split's shards in line order and write `output` as `save_prepared`
    does (splits, report.json with merged reports, tokenizer/). Returns (output path, {split: report}).
    A missing, damaged or foreign shard is a ValueError naming it and the command that makes it anew (--stage
    shards --shard-index K: `run_shards` verifies finished shards and redoes a bad one); `check_inputs` (default)
    rescans the input files: one edited since planning is a ValueError naming it.
    `label(reports)` may add to the reports before they are written; `started` (perf_counter) adds the wall time."""
    import datasets

    from .prepare import save_prepared

    work = Path(work_dir)
    plan = load_plan(work)
    problems = [(shard["index"], problem) for shard in plan["shards"] if (problem := shard_problem(work, plan, shard))]
    if problems:
        named = ", ".join(f"{index} ({problem})" for index, problem in problems[:5]) + (
            " ..." if len(problems) > 5 else ""
        )
        raise ValueError(
            f"cannot merge {work}: shard {named}; run them with the same flags and --stage shards "
            f"--shard-index {' '.join(str(index) for index, _ in problems)} (a damaged shard is made anew), "
            "then --stage merge"
        )
    if check_inputs:
        _check_input_files(plan)
    prepared, reports = {}, {}
    for name in plan["splits"]:
        shards = [s for s in plan["shards"] if s["split"] == name]
        parts = [_load_shard(work, s["index"]) for s in shards]
        shard_reports = [json.loads((_shard_dir(work, s["index"]) / "report.json").read_text()) for s in shards]
        if not parts:  # an empty file: no shard
            continue
        prepared[name] = datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
        reports[name] = {
            **merge_reports(shard_reports),
            "fingerprint": _plan_fingerprint(plan),
            "sharded": {
                "work_dir": str(work),
                "shard_size": plan["shard_size"],
                "priors": plan.get("priors"),
                "tokenizer": plan.get("tokenizer"),
                "plan_timings_s": plan.get("timings_s"),
            },
        }
        if started is not None:
            reports[name]["timings_s"]["wall"] = round(time.perf_counter() - started, 3)
    if label is not None:
        label(reports)
    return save_prepared(output, prepared, reports, _load_tokenizer(work, plan), overwrite=overwrite), reports


def _plan_fingerprint(plan: dict) -> str:
    return digest(json.loads(json.dumps(plan["request"], default=str)))[:20]


def prepare_in_shards(work_dir, output, files, *, overwrite: bool = True, progress: bool = True, **plan_options):
    """Plan (or resume) -> every unfinished shard -> merge: the whole sharded preparation in this process.
    Returns (output path, {split: report}). Options as `plan_preparation`. Killed, it resumes when called again
    with the same request; the work directory is kept (remove it when the output is all you need)."""
    started = time.perf_counter()
    plan = plan_preparation(work_dir, files, **plan_options)
    run_shards(work_dir, plan, progress=progress)
    return merge_shards(work_dir, output, overwrite, started=started)
