"""Feature preparation: parallel text + a tokenizer -> a `datasets.Dataset` with the inputs every model needs.

    sources, targets (files, lists, a Hub dataset id or a local `datasets` directory)
      -> whitespace words; empty / over-long pairs skipped and counted
      -> word alignment (eflomal forward + reverse, grow-diag-final-and; or a Pharaoh file)      [alignment.py]
      -> in `Dataset.map(batched=True, num_proc=...)`: tokenisation, then per source token
           reorder_positions  oracle BTG order (XL PE Sec. 3.1, Fig. 1b), projected to sub-words [reordering.py]
           target_positions   DPE target ranks (DPE Sec. 3.1, Eq. 1), -100 = no supervision     [reordering.py]
           pos_tag_ids        source POS tags (mvPE+POS Sec. IV), and per label token
           decoder_pos_tag_ids target POS tags                                                     [tagging.py]
      -> report (pairs read / kept / skipped and why, unaligned ratio, BTG repairs, mean Kendall's tau,
         unknown tags, tag vocabularies, timings), optional cache keyed by inputs + tokenizer + options.

Word unit: whitespace-separated words (`str.split()`); the text given to the tokenizer is the words joined by
single spaces, so callers should normalise whitespace the same way at inference. Sub-word projection uses the
fast tokenizer's `word_ids()`; when those do not follow whitespace words (a normaliser that splits or merges
words) the character offsets are used; a tokenizer without `word_ids()` (slow sentencepiece tokenizers such as
`MarianTokenizer`) is run word by word, which matches whole-sentence tokenisation for sentencepiece models.
Stages: reading and cleaning `corpus.py`, tokenisation with word ids `tokenization.py`, per-example
features `example_features.py`, the cache `cache.py`; this file runs them in order and writes the report.
`xlpe-prepare` (`xlpe.cli.prepare`) is the command line front end. Text without a tokenizer gets the joint
one `xlpe-train` would train (`train_tokenizer_for_splits`); `save_prepared` writes the directory that
`xlpe-train --prepared_dataset` reads: the splits (`DatasetDict.save_to_disk`), `report.json` ({split:
report}) and, in `tokenizer/`, the tokenizer the features were made with.

Choices (where the papers' code differs or is silent):
  * one symmetrised word alignment feeds both the BTG oracle and the DPE targets (the DPE code ran fast_align
    in one direction on sub-words): a token takes its word's first linked target index, so the pieces of a
    word stay together and in order; `symmetrization="forward"` gives one-direction links;
  * DPE unaligned tokens: dropped from the loss (-100, as the DPE code) by default, `dpe_unaligned="keep"`
    for the paper's prose ("we do not change their position");
  * the noise attack (XL PE Sec. 4.5) swaps word-level XL indices before sub-word projection;
  * over-long means more than `max_length` tokens (incl. </s>) on the source side, more than `max_target_length`
    (default `max_length`) on the target side; such pairs are skipped and counted, not cut.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from .alignment import _link_arrays, align_with_eflomal_flat, links_column, read_pharaoh_file
from .cache import (
    _fingerprint,
    _load_cache,
    _save_cache,
    load_cached_tokenizer,
    save_cached_tokenizer,
    tokenizer_cache_key,
)
from .corpus import (  # noqa: F401  (re-exported: the preparation API in one place)
    SKIP_REASONS,
    ParallelSplit,
    filter_pairs,
    load_parallel_dataset,
    read_parallel_files,
    validate_links,
)
from .example_features import PREPARATION_VERSION, PrepareOptions, _compute_features, _tagger  # noqa: F401
from .text_files import OutputExistsError, atomic_output_dir
from .tokenization import tokenize_with_word_ids, train_joint_tokenizer, vocab_fingerprint  # noqa: F401

PREPARED_TOKENIZER_DIR = "tokenizer"  # where `save_prepared` puts the tokenizer, inside the prepared directory

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------
# Preparation: filter -> align -> features -> report (-> cache)
# ----------------------------------------------------------------------------------------------------------


def _word_alignments(
    splits: dict[str, ParallelSplit],
    kept: dict[str, list[int]],
    texts: dict[str, tuple[list, list]],
    options: PrepareOptions,
) -> dict:
    """Links of the kept pairs per split, as Arrow list<int32> columns of flat links: given ones, or one eflomal
    run over all splits that lack them (unsupervised, so more text gives better links). eflomal samples: runs
    differ slightly; pass `alignments=` or use `cache_dir` for reproducible features. `texts`: the kept pairs'
    words joined by single spaces, per split."""
    import pyarrow as pa

    links = {
        name: pa.array([splits[name].alignments[k] for k in kept[name]], type=pa.list_(pa.int32()))
        for name, split in splits.items()
        if split.alignments is not None
    }
    to_align = [name for name, split in splits.items() if split.alignments is None]
    if not to_align:
        return links
    sources = [text for name in to_align for text in texts[name][0]]
    targets = [text for name in to_align for text in texts[name][1]]
    logger.info("xlpe-prepare: aligning %d pairs (forward + reverse, %s)", len(sources), options.symmetrization)
    if options.aligner == "eflomal":
        sentence, pairs = align_with_eflomal_flat(
            sources, targets, options.symmetrization, options.alignment_runs, **(options.eflomal_options or {})
        )
    elif hasattr(options.aligner, "align_flat"):
        sentence, pairs = options.aligner.align_flat(sources, targets)
    else:
        aligned = [np.asarray(pair, dtype=np.int64).reshape(-1).tolist() for pair in options.aligner(sources, targets)]
        if len(aligned) != len(sources):
            raise ValueError(f"the aligner returned {len(aligned)} link lists for {len(sources)} sentence pairs")
        sentence, pairs = _link_arrays(aligned)
    start = 0
    for name in to_align:
        links[name] = links_column(sentence, pairs, len(kept[name]), start)
        start += len(kept[name])
    return links


def prepare_splits(splits: dict[str, ParallelSplit], tokenizer, **options):
    """Prepare several splits with one alignment run over all of them (eflomal learns from every split's text);
    options as `prepare_dataset`. Returns ({split: Dataset}, {split: report})."""
    return _prepare_splits(splits, tokenizer, PrepareOptions(**options))


def filter_and_align(splits: dict[str, ParallelSplit], options: PrepareOptions) -> dict:
    """The first half of `_prepare_splits`: the kept pairs of every split (and the skip counts), their words
    joined by single spaces, and their links (`_word_alignments`), with timings. The sharded preparation runs
    it for the next shard while the features of the current one are computed (`sharded.run_shards`)."""
    timings, started = {}, time.perf_counter()
    kept, skipped = {}, {}
    for name, split in splits.items():
        kept[name], skipped[name] = filter_pairs(split, options.max_length, options.target_limit)
    timings["filter"] = time.perf_counter() - started
    texts = {
        name: (
            [" ".join(split.sources[k].split()) for k in kept[name]],
            [" ".join(split.targets[k].split()) for k in kept[name]],
        )
        for name, split in splits.items()
    }  # the words joined by single spaces, once
    if options.needs_links:
        links = _word_alignments(splits, kept, texts, options)
        timings["align"] = time.perf_counter() - started - timings["filter"]
    else:
        links = {name: pa.array([[]] * len(keep), type=pa.list_(pa.int32())) for name, keep in kept.items()}
    return {"kept": kept, "skipped": skipped, "texts": texts, "links": links, "timings": timings}


def _prepare_splits(splits: dict[str, ParallelSplit], tokenizer, options: PrepareOptions, aligned: dict | None = None):
    """Shared engine of `prepare_dataset` and `prepare_hf_dataset`; returns ({split: Dataset}, {split: report}).
    `aligned`: `filter_and_align(splits, options)` when it was run already."""
    import datasets
    from datasets.table import InMemoryTable

    fingerprint = _fingerprint(splits, tokenizer, options.describe())
    cached = None if options.overwrite_cache else _load_cache(options.cache_dir, fingerprint)
    if cached is not None:
        return cached
    aligned = aligned if aligned is not None else filter_and_align(splits, options)
    kept, skipped, texts, links = (aligned[key] for key in ("kept", "skipped", "texts", "links"))
    timings = dict(aligned["timings"])

    features_started = time.perf_counter()
    taggers = {
        side: _tagger(spec, options.nltk_data)
        for side, spec, feature in (
            ("source", options.source_tagger, "pos_tag_ids"),
            ("target", options.target_tagger, "decoder_pos_tag_ids"),
        )
        if feature in options.features
    }  # built here, so that forked workers inherit them
    if options.num_proc and options.num_proc > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked workers: no Rust thread pools there
    prepared, reports = {}, {}
    for name, split in splits.items():
        keep = kept[name]
        table = datasets.Dataset(
            InMemoryTable(
                pa.table(
                    {  # Arrow columns as they are (no per-example encoding)
                        "_line": pa.array(np.asarray(keep, dtype=np.int64) + 1 + split.line_offset, type=pa.int64()),
                        "_source": pa.array(texts[name][0], type=pa.string()),
                        "_target": pa.array(texts[name][1], type=pa.string()),
                        "_links": links[name],
                    }
                )
            )
        )
        if len(table) == 0:  # nothing kept: no batch to run
            table = datasets.Dataset.from_dict({column: [] for column in _output_columns(options, name)})
        else:
            table = table.map(
                _compute_features,
                batched=True,
                batch_size=options.batch_size,
                remove_columns=table.column_names,
                num_proc=options.num_proc
                if (options.num_proc or 1) > 1 and len(table) > 1
                else None,  # 1: in-process, no pool
                new_fingerprint=f"{fingerprint}-{name}",
                fn_kwargs=dict(tokenizer=tokenizer, options=options, keep_text=options.keeps_text(name)),
                desc=f"xlpe-prepare {name}",
            )
        reports[name], prepared[name] = _report_and_strip(table, split, skipped[name], options, taggers, fingerprint)
    timings["tokenize_reorder_tag"] = time.perf_counter() - features_started
    timings["total"] = sum(timings.values())
    tokenizer_report = {"vocab_size": len(tokenizer), "vocab_fingerprint": vocab_fingerprint(tokenizer)}
    for report in reports.values():
        report["timings_s"] = {stage: round(seconds, 3) for stage, seconds in timings.items()}
        report["tokenizer"] = dict(tokenizer_report)
    _save_cache(options.cache_dir, fingerprint, prepared, reports, replace=options.overwrite_cache)
    return prepared, reports


def _output_columns(options: PrepareOptions, split: str) -> list[str]:
    columns = ["input_ids", "attention_mask", "labels", *options.features, "_too_long", "_words"]
    columns += ["line", "source_text", "target_text", "word_alignment"] if options.keeps_text(split) else []
    columns += [f"_unknown_{f}" for f in ("pos_tag_ids", "decoder_pos_tag_ids") if f in options.features]
    return columns


def _report_and_strip(table, split: ParallelSplit, skipped: Counter, options: PrepareOptions, taggers, fingerprint):
    """Aggregate the `_` statistics columns into the report; drop over-long pairs and those columns."""
    stats = table.select_columns([c for c in table.column_names if c.startswith("_")]).to_dict()
    for reason in filter(None, stats["_too_long"]):
        skipped[reason] += 1
    keep_rows = [k for k, reason in enumerate(stats["_too_long"]) if not reason]
    column = lambda name, dtype: np.array(stats.get(name, []), dtype=dtype)[keep_rows]  # noqa: E731
    words = column("_words", np.int64)
    report = {
        "xlpe_prepare_version": PREPARATION_VERSION,
        "fingerprint": fingerprint,
        "cache_hit": False,
        "source": split.source_origin,
        "target": split.target_origin,
        "alignments": split.alignment_origin or (options.describe()["aligner"] if options.needs_links else None),
        "pairs_read": len(split.sources),
        "pairs_kept": len(keep_rows),
        "pairs_skipped": dict(skipped),
        "pairs_skipped_total": sum(skipped.values()),
        "features": list(options.features),
        "options": options.describe(),
        "source_words": int(words.sum()),
    }
    if options.needs_links:
        unaligned, repaired, tau = column("_unaligned", np.int64), column("_repaired", bool), column("_tau", float)
        report.update(
            unaligned_source_words=int(unaligned.sum()),
            unaligned_ratio=float(unaligned.sum() / max(words.sum(), 1)),
            btg_repairs=int(repaired.sum()),
            btg_repair_ratio=float(repaired.mean()) if len(repaired) else 0.0,
            mean_kendall_tau=float(np.nanmean(tau)) if np.isfinite(tau).any() else None,
            kendall_tau_sentences=int(np.isfinite(tau).sum()),  # sentences of 2+ words
        )
    for feature, side in (("pos_tag_ids", "source"), ("decoder_pos_tag_ids", "target")):
        if feature in options.features:
            unknown = Counter(tag for k in keep_rows for tag in stats[f"_unknown_{feature}"][k])
            report.setdefault("unknown_tags", {})[side] = {"count": sum(unknown.values()), "tags": dict(unknown)}
            report.setdefault("tag_vocabularies", {})[side] = taggers[side].vocabulary.to_list()
    if len(keep_rows) != len(table):
        table = table.select(keep_rows)
    return report, table.remove_columns(list(stats))


# ----------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------


def prepare_dataset(
    sources: str | os.PathLike | Sequence[str],
    targets: str | os.PathLike | Sequence[str],
    tokenizer,
    *,
    alignments: str | os.PathLike | Sequence | None = None,
    **options,
):
    """Prepare one parallel corpus; returns (`datasets.Dataset`, report dict).

    Args:
        sources, targets: paths of parallel UTF-8 files (plain or .gz) or lists of sentences.
        tokenizer: a Transformers tokenizer (`labels` come from `tokenizer(text_target=...)`).
        alignments: None (align with eflomal), a Pharaoh file path, or per pair links (Pharaoh strings, flat
            [i0, j0, ...] lists or (i, j) pairs), 0-based source-target word indices.
        features: subset of FEATURES; None = reorder/target positions, plus tags for each given tagger.
        alignment_runs: eflomal runs per direction voted over (strict majority) before symmetrising; more runs,
            a more stable oracle, K times the alignment time. `eflomal_options={"seed": N}`: a reproducible
            alignment (the same corpus and options give the same links and oracle; eflomal_seed.py).
        aligner: "eflomal" or a callable(sources, targets) -> links per pair; eflomal_options: `eflomal.Aligner`
            keyword arguments (e.g. n_iterations, n_samplers).
        symmetrization: "grow-diag-final-and" (default), "grow-diag-final", "grow-diag", "intersection",
            "union", "forward", "reverse".
        unaligned: "right" (lader's default) or "left": where unaligned words attach in the BTG oracle.
        dpe_unaligned: "drop" (default, as the DPE code: -100, no loss) or "keep" (DPE paper prose: an unaligned
            token's target is its own index).
        source_tagger, target_tagger: names of the tagger registry (xlpe.models.taggers) or `Tagger`s;
            nltk_data: extra nltk_data directory searched first.
        max_length: longest kept sequence in tokens (incl. </s>), per side; longer pairs are skipped, counted.
        max_target_length: longest kept target in tokens (incl. </s>) when it differs from max_length (which
            then limits the source only); `xlpe-train` passes --max_source_length and --max_target_length.
        num_proc, batch_size: `Dataset.map` parallelism. cache_dir: reuse an identical earlier run.
        noise_ratio, seed: XL PE Sec. 4.5 noise attack on reorder_positions (fraction of words swapped).
        keep_text: which splits also keep `line` (1-based input line), `source_text`, `target_text` and
            `word_alignment`: True (all), False (none), "eval" (default: all but train, the ones scoring needs)
            or a list of split names.
    """
    options = PrepareOptions(**options)
    is_path = lambda x: isinstance(x, (str, os.PathLike))  # noqa: E731
    if is_path(sources) != is_path(targets):
        raise ValueError("give sources and targets both as files or both as lists of sentences")
    if is_path(sources):
        split = read_parallel_files(sources, targets, alignments if is_path(alignments) else None)
    else:
        if len(sources) != len(targets):
            raise ValueError(f"sources has {len(sources)} sentences, targets has {len(targets)}")
        split = ParallelSplit(list(sources), list(targets), "<sources>", "<targets>")
    if alignments is not None and split.alignments is None:
        if is_path(alignments):
            src_len, tgt_len = [len(s.split()) for s in split.sources], [len(t.split()) for t in split.targets]
            split.alignments = read_pharaoh_file(alignments, src_len, tgt_len, split.source_origin)
            split.alignment_origin = str(alignments)
        else:
            split.alignments, split.alignment_origin = validate_links(alignments, split), "<alignments>"
    prepared, reports = _prepare_splits({"train": split}, tokenizer, options)
    return prepared["train"], reports["train"]


def prepare_hf_dataset(
    name_or_path: str,
    tokenizer,
    *,
    source_lang: str,
    target_lang: str,
    splits: Sequence[str] | None = None,
    config_name: str | None = None,
    source_column: str | None = None,
    target_column: str | None = None,
    **options,
):
    """Prepare a Hub dataset id or a local `datasets` directory; returns (`DatasetDict`, {split: report}).
    All splits are word-aligned in one eflomal run. Options as for `prepare_dataset`."""
    import datasets

    options = PrepareOptions(**options)
    loaded = load_parallel_dataset(
        name_or_path, source_lang, target_lang, splits, config_name, source_column, target_column
    )
    prepared, reports = _prepare_splits(loaded, tokenizer, options)
    return datasets.DatasetDict(prepared), reports


# ----------------------------------------------------------------------------------------------------------
# A tokenizer for text that has none, and the prepared directory
# ----------------------------------------------------------------------------------------------------------


def train_tokenizer_for_splits(
    splits: dict[str, ParallelSplit],
    *,
    vocab_size: int = 8000,
    model: str = "unigram",
    model_max_length: int = 512,
    cache_dir: str | os.PathLike | None = None,
):
    """The joint sub-word tokenizer `xlpe-train` trains when given none: `train_joint_tokenizer` on the 'train'
    split's sources + targets (validation and test text stay unseen). The result is canonical (the same text
    and options give the same tokenizer, so the feature cache hits); with `cache_dir` it is also kept there and
    an identical later call loads it instead of training again."""
    if "train" not in splits:
        raise ValueError(
            f"a tokenizer is trained on the 'train' split, and there is none (splits: {sorted(splits)}); "
            "give the tokenizer to use"
        )
    texts = splits["train"].sources + splits["train"].targets
    if not any(text.strip() for text in texts):
        raise ValueError(
            f"no text to train a tokenizer on: {splits['train'].source_origin} and "
            f"{splits['train'].target_origin} are empty"
        )
    options = dict(vocab_size=vocab_size, model=model, model_max_length=model_max_length)
    key = tokenizer_cache_key(texts, options)
    tokenizer = load_cached_tokenizer(cache_dir, key)
    if tokenizer is None:
        logger.info(
            "xlpe-prepare: training a joint %s tokenizer (%d pieces) on %d sentence pairs",
            model,
            vocab_size,
            len(splits["train"].sources),
        )
        tokenizer = train_joint_tokenizer(texts, **options)
        save_cached_tokenizer(cache_dir, key, tokenizer)
    return tokenizer


def save_prepared(
    output_dir: str | os.PathLike, prepared: dict, reports: dict, tokenizer, overwrite: bool = True
) -> Path:
    """Write a prepared directory: the splits (`DatasetDict.save_to_disk`), `report.json` ({split: report})
    and the tokenizer in `tokenizer/`, which `xlpe-train --prepared_dataset` finds by itself. Returns its path.

    The directory is written beside `output_dir` and renamed into place when complete (`text_files.
    atomic_output_dir`): a failure leaves no partial directory behind, and a reader never sees half of one.
    `overwrite=False` refuses an existing `output_dir` (OutputExistsError, a ValueError)."""
    import datasets

    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise ValueError(f"output {output} is a file, expected a directory")
    if output.exists() and not overwrite:
        raise OutputExistsError(f"--output {output}: the directory exists; pass --overwrite_output to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output_dir(output, overwrite=overwrite) as staging:
        datasets.DatasetDict(prepared).save_to_disk(str(staging))
        tokenizer.save_pretrained(str(staging / PREPARED_TOKENIZER_DIR))
        (staging / "report.json").write_text(json.dumps(reports, indent=2, ensure_ascii=False, default=str))
    return output


def __getattr__(name: str):
    """`FEATURES`: every registered extra input, read from the registry when asked (plugins registered after this
    module was imported included), as the example_features module gives it."""
    if name == "FEATURES":
        from . import example_features

        return example_features.FEATURES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
