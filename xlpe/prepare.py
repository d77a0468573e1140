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
`xlpe-prepare` (`main`) is the command line front end.

Choices (where the papers' code differs or is silent):
  * one symmetrised word alignment feeds both the BTG oracle and the DPE targets (the DPE code ran fast_align
    in one direction on sub-words): a token takes its word's first linked target index, so the pieces of a
    word stay together and in order; `symmetrization="forward"` gives one-direction links;
  * DPE unaligned tokens: dropped from the loss (-100, as the DPE code) by default, `dpe_unaligned="keep"`
    for the paper's prose ("we do not change their position");
  * the noise attack (XL PE Sec. 4.5) swaps word-level XL indices before sub-word projection;
  * over-long means more than `max_length` tokens (incl. </s>) on either side; such pairs are skipped, not cut.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import logging
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .alignment import (
    SYMMETRIZATIONS,
    align_with_eflomal,
    format_pharaoh,
    parse_pharaoh_line,
    read_pharaoh_file,
    read_text_lines,
)
from .reordering import (
    add_reordering_noise,
    dpe_target_positions,
    kendall_tau,
    oracle_xl_positions_flat,
    project_positions_to_subwords,
)
from .tagging import UNK_TAG_ID, Tagger, get_tagger, subword_tag_ids

logger = logging.getLogger(__name__)

FEATURES = ("reorder_positions", "target_positions", "pos_tag_ids", "decoder_pos_tag_ids")
SKIP_REASONS = ("empty_source", "empty_target", "source_too_long", "target_too_long")
PREPARATION_VERSION = 2  # bump when the produced features change meaning (invalidates caches)
_TAGGERS: dict[tuple, Tagger] = {}  # per process; built before `map` so forked workers inherit them


@dataclass
class ParallelSplit:
    """One split of raw sentence pairs, with where each side came from (for error messages and the report)."""

    sources: list[str]
    targets: list[str]
    source_origin: str
    target_origin: str
    alignments: list[list[int]] | None = None  # flat Pharaoh links per pair, already validated
    alignment_origin: str | None = None


# ----------------------------------------------------------------------------------------------------------
# Reading inputs
# ----------------------------------------------------------------------------------------------------------


def read_parallel_files(source_file, target_file, alignment_file=None) -> ParallelSplit:
    """Read parallel UTF-8 files (plain or .gz) and an optional Pharaoh file; all must have equal line counts."""
    sources, targets = read_text_lines(source_file), read_text_lines(target_file)
    if len(sources) != len(targets):
        raise ValueError(
            f"parallel files differ in line count: {source_file} has {len(sources)} lines, "
            f"{target_file} has {len(targets)} lines"
        )
    split = ParallelSplit(sources, targets, str(source_file), str(target_file))
    if alignment_file is not None:
        split.alignments = read_pharaoh_file(
            alignment_file, [len(s.split()) for s in sources], [len(t.split()) for t in targets], str(source_file)
        )
        split.alignment_origin = str(alignment_file)
    return split


def load_parallel_dataset(
    name_or_path: str,
    source_lang: str,
    target_lang: str,
    splits: Sequence[str] | None = None,
    config_name: str | None = None,
    source_column: str | None = None,
    target_column: str | None = None,
) -> dict[str, ParallelSplit]:
    """Sentence pairs of a Hub dataset id (`datasets.load_dataset`) or a local `save_to_disk` directory
    (`datasets.load_from_disk`). Layouts: a `translation` column of {lang: text} dicts (WMT, OPUS, ...),
    one column per language, or explicit `source_column`/`target_column`."""
    import datasets

    path = Path(name_or_path)
    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        loaded = datasets.load_from_disk(str(path))
    else:
        loaded = datasets.load_dataset(name_or_path, config_name)
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    result = {}
    for split in splits or list(loaded):
        if split not in loaded:
            raise ValueError(f"{name_or_path} has no split {split!r}; it has {sorted(loaded)}")
        table = loaded[split]
        origin = f"{name_or_path}[{split}]"
        if source_column or target_column:
            sources, targets = table[source_column or source_lang], table[target_column or target_lang]
        elif "translation" in table.column_names:
            pairs = table["translation"]
            sources = [p.get(source_lang) if p else None for p in pairs]
            targets = [p.get(target_lang) if p else None for p in pairs]
        elif source_lang in table.column_names and target_lang in table.column_names:
            sources, targets = table[source_lang], table[target_lang]
        else:
            raise ValueError(
                f"{origin}: no 'translation' column and no columns {source_lang!r}/{target_lang!r}; columns: "
                f"{table.column_names} (pass source_column/target_column)"
            )
        for side, texts, lang in (("source", sources, source_lang), ("target", targets, target_lang)):
            for row, text in enumerate(texts):
                if text is not None and not isinstance(text, str):
                    raise ValueError(f"{origin} row {row}: {side} ({lang}) is {type(text).__name__}, expected str")
        result[split] = ParallelSplit(
            [s or "" for s in sources], [t or "" for t in targets], f"{origin}:{source_lang}", f"{origin}:{target_lang}"
        )
    return result


# ----------------------------------------------------------------------------------------------------------
# Tokenisation with word ids (the sub-word projection's input)
# ----------------------------------------------------------------------------------------------------------


def _word_ids_from_encoding(encoding, words: list[str], text: str) -> list[int]:
    """Word index of every token (-1 for special tokens) from a `tokenizers.Encoding` of " ".join(words).

    Uses `word_ids` when they enumerate exactly the whitespace words in order; otherwise maps each token's
    start offset to the word containing it (a space belongs to the word after it)."""
    word_ids = encoding.word_ids
    seen = [w for k, w in enumerate(word_ids) if w is not None and (k == 0 or word_ids[k - 1] != w)]
    if seen == list(range(len(words))):
        return [-1 if w is None else w for w in word_ids]
    starts = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
    result, previous = [], 0
    for special, (start, _) in zip(encoding.special_tokens_mask, encoding.offsets):
        if special:
            result.append(-1)
            continue
        while start < len(text) and text[start] == " ":
            start += 1
        previous = max(previous, min(max(bisect.bisect_right(starts, start) - 1, 0), len(words) - 1))
        result.append(previous)  # non-decreasing, so the pieces of a word stay contiguous
    return result


def _tokenize_word_by_word(tokenizer, words_batch, target: bool) -> tuple[list[list[int]], list[list[int]]]:
    """Fallback for tokenizers without `word_ids()`: encode each word alone, then add the special tokens."""
    all_ids, all_word_ids = [], []
    for words in words_batch:
        pieces = tokenizer(text_target=words, add_special_tokens=False) if target else tokenizer(
            words, add_special_tokens=False
        )
        flat = [i for piece in pieces["input_ids"] for i in piece] if words else []
        owner = [w for w, piece in enumerate(pieces["input_ids"]) for _ in piece] if words else []
        ids = tokenizer.build_inputs_with_special_tokens(flat)
        special = tokenizer.get_special_tokens_mask(flat)
        owner_iter = iter(owner)
        all_ids.append(ids)
        all_word_ids.append([-1 if s else next(owner_iter) for s in special])
    return all_ids, all_word_ids


def tokenize_with_word_ids(tokenizer, texts: list[str], target: bool = False):
    """(input ids, word ids with -1 for special tokens) per text; texts are single-space-joined words."""
    texts = list(texts)
    words_batch = [t.split() for t in texts]
    if not getattr(tokenizer, "is_fast", False):
        return _tokenize_word_by_word(tokenizer, words_batch, target)
    encoded = tokenizer(text_target=texts) if target else tokenizer(texts)
    encodings = encoded.encodings
    return (
        [e.ids for e in encodings],
        [_word_ids_from_encoding(e, w, t) for e, w, t in zip(encodings, words_batch, texts)],
    )


# ----------------------------------------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------------------------------------


@dataclass
class PrepareOptions:
    """Everything that decides what `prepare_dataset` computes (see its docstring for the meaning)."""

    features: Sequence[str] | None = None  # None: positions, plus tags for each given tagger
    aligner: str | Callable = "eflomal"
    symmetrization: str = "grow-diag-final-and"
    unaligned: str = "right"
    dpe_unaligned: str = "drop"
    source_tagger: str | Tagger | None = None
    target_tagger: str | Tagger | None = None
    nltk_data: str | os.PathLike | None = None
    max_length: int = 256
    num_proc: int | None = None
    batch_size: int = 1000
    cache_dir: str | os.PathLike | None = None
    noise_ratio: float = 0.0
    seed: int = 0
    eflomal_options: dict | None = None
    keep_text: bool | str | Sequence[str] = "eval"  # text columns for: True (every split), False (none), "eval"
    #   (every split but train: what scoring needs, small), or a list of split names

    def __post_init__(self):
        if self.features is None:
            self.features = ["reorder_positions", "target_positions"]
            self.features += ["pos_tag_ids"] if self.source_tagger else []
            self.features += ["decoder_pos_tag_ids"] if self.target_tagger else []
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown features {unknown}; choose from {list(FEATURES)}")
        for feature, tagger, side in (("pos_tag_ids", self.source_tagger, "source"),
                                      ("decoder_pos_tag_ids", self.target_tagger, "target")):  # fmt: skip
            if feature in self.features and not tagger:
                raise ValueError(f"{feature} needs {side}_tagger (e.g. 'nltk-en', 'jieba-zh', 'spacy:<model>')")
        if self.symmetrization not in SYMMETRIZATIONS:
            raise ValueError(f"unknown symmetrization {self.symmetrization!r}; choose from {list(SYMMETRIZATIONS)}")
        if self.unaligned not in ("right", "left"):
            raise ValueError(f"unaligned must be 'right' or 'left', got {self.unaligned!r}")
        if self.dpe_unaligned not in ("drop", "keep"):
            raise ValueError(f"dpe_unaligned must be 'drop' or 'keep', got {self.dpe_unaligned!r}")
        if not 0.0 <= self.noise_ratio <= 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1], got {self.noise_ratio}")
        if not (self.aligner == "eflomal" or callable(self.aligner)):
            raise ValueError(f"aligner must be 'eflomal' or a callable, got {self.aligner!r}")
        self.nltk_data = None if self.nltk_data is None else str(self.nltk_data)
        if isinstance(self.keep_text, str) and self.keep_text not in ("eval", "all", "none"):
            raise ValueError(f"keep_text must be True, False, 'eval', 'all', 'none' or a list of split names, got {self.keep_text!r}")
        if not isinstance(self.keep_text, (bool, str)):
            self.keep_text = tuple(self.keep_text)

    def keeps_text(self, split: str) -> bool:
        """Does the prepared `split` keep `line`, `source_text`, `target_text` and `word_alignment`?"""
        if isinstance(self.keep_text, bool):
            return self.keep_text
        if isinstance(self.keep_text, str):
            return self.keep_text == "all" or (self.keep_text == "eval" and split != "train")
        return split in self.keep_text

    @property
    def needs_links(self) -> bool:
        return "reorder_positions" in self.features or "target_positions" in self.features

    def describe(self) -> dict:
        """The options that change the result, JSON-able (for the report and the cache key)."""
        def name(x):  # taggers and aligners given as objects are described by their name
            if x is None or isinstance(x, str):
                return x
            return getattr(x, "name", getattr(x, "__name__", type(x).__name__))

        return dict(features=list(self.features), aligner=name(self.aligner),
                    symmetrization=self.symmetrization, unaligned=self.unaligned, dpe_unaligned=self.dpe_unaligned,
                    source_tagger=name(self.source_tagger), target_tagger=name(self.target_tagger),
                    max_length=self.max_length, noise_ratio=self.noise_ratio, seed=self.seed,
                    eflomal_options=self.eflomal_options or {},
                    keep_text=list(self.keep_text) if isinstance(self.keep_text, tuple) else self.keep_text)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Per-batch features (runs inside `Dataset.map`, possibly in worker processes)
# ----------------------------------------------------------------------------------------------------------


def _tagger(spec: str | Tagger, nltk_data: str | None) -> Tagger:
    """One tagger instance per (name, data path) and process."""
    if isinstance(spec, Tagger):
        return spec
    key = (spec, nltk_data if spec == "nltk-en" else None)
    if key not in _TAGGERS:
        _TAGGERS[key] = get_tagger(spec, **({"nltk_data": nltk_data} if key[1] else {}))
    return _TAGGERS[key]


def _compute_features(batch: dict, tokenizer, options: PrepareOptions, keep_text: bool = False) -> dict:
    """Tokenise a batch of pairs and compute the requested features plus `_`-prefixed statistics columns."""
    sources, targets, lines, links = batch["_source"], batch["_target"], batch["_line"], batch["_links"]
    source_words = [s.split() for s in sources]
    input_ids, source_word_ids = tokenize_with_word_ids(tokenizer, sources)
    labels, target_word_ids = tokenize_with_word_ids(tokenizer, targets, target=True)
    limit = options.max_length
    out = {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        "_too_long": [
            "source_too_long" if len(s) > limit else "target_too_long" if len(t) > limit else ""
            for s, t in zip(input_ids, labels)
        ],
        "_words": [len(w) for w in source_words],
    }
    if options.needs_links:
        none_ids = [[None if w < 0 else w for w in ids] for ids in source_word_ids]
        counts = np.fromiter(map(len, links), dtype=np.int64, count=len(links)) // 2
        flat = np.fromiter(itertools.chain.from_iterable(links), dtype=np.int64, count=int(counts.sum()) * 2)
        oracle = oracle_xl_positions_flat(
            np.repeat(np.arange(len(links)), counts), flat[0::2], flat[1::2], np.array(out["_words"]),
            unaligned=options.unaligned,
        )  # fmt: skip
        word_positions = oracle.to_lists()
        out["_unaligned"] = oracle.unaligned_words.tolist()
        out["_repaired"] = oracle.repaired.tolist()
        out["_tau"] = [kendall_tau(p) if len(p) > 1 else float("nan") for p in word_positions]
        if "reorder_positions" in options.features:
            if options.noise_ratio > 0:  # XL PE Sec. 4.5, on word indices so that sub-words still move together
                word_positions = [
                    add_reordering_noise(p, options.noise_ratio, np.random.default_rng([options.seed, line]))
                    for p, line in zip(word_positions, lines)
                ]
            out["reorder_positions"] = list(map(project_positions_to_subwords, word_positions, none_ids))
        if "target_positions" in options.features:
            out["target_positions"] = [
                dpe_target_positions(pair_links, len(words), ids, unaligned=options.dpe_unaligned)
                for pair_links, words, ids in zip(links, source_words, none_ids)
            ]
    for feature, spec, words_batch, word_ids_batch in (
        ("pos_tag_ids", options.source_tagger, source_words, source_word_ids),
        ("decoder_pos_tag_ids", options.target_tagger, [t.split() for t in targets], target_word_ids),
    ):
        if feature in options.features:
            tagger = _tagger(spec, options.nltk_data)
            tags = tagger.tag(words_batch)
            word_tag_ids = [tagger.vocabulary.encode(t) for t in tags]
            out[feature] = list(map(subword_tag_ids, word_tag_ids, word_ids_batch))
            out[f"_unknown_{feature}"] = [
                [t for t, i in zip(ts, ids) if i == UNK_TAG_ID] for ts, ids in zip(tags, word_tag_ids)
            ]
    if keep_text:
        out.update(line=lines, source_text=sources, target_text=targets,
                   word_alignment=list(map(format_pharaoh, links)))  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------------------------
# Preparation: filter -> align -> features -> report (-> cache)
# ----------------------------------------------------------------------------------------------------------


def _filter_pairs(split: ParallelSplit, max_length: int) -> tuple[list[int], Counter]:
    """Indices of pairs to keep, and the skip counts. More than max_length words is over-long for sure (every
    word is at least one token); pairs over-long only in tokens are caught after tokenisation."""
    skipped = Counter({reason: 0 for reason in SKIP_REASONS})
    keep = []
    for k, (source, target) in enumerate(zip(split.sources, split.targets)):
        n, m = len(source.split()), len(target.split())
        reason = ("empty_source" if n == 0 else "empty_target" if m == 0 else "source_too_long" if n > max_length
                  else "target_too_long" if m > max_length else None)  # fmt: skip
        if reason:
            skipped[reason] += 1
        else:
            keep.append(k)
    return keep, skipped


def _word_alignments(splits: dict[str, ParallelSplit], kept: dict[str, list[int]], options: PrepareOptions):
    """Links of the kept pairs per split: given ones, or one eflomal run over all splits that lack them
    (unsupervised, so more text gives better links). eflomal samples: runs differ slightly; pass
    `alignments=` or use `cache_dir` for reproducible features."""
    given = [name for name, split in splits.items() if split.alignments is not None]
    links = {name: [splits[name].alignments[k] for k in kept[name]] for name in given}
    to_align = [name for name, split in splits.items() if split.alignments is None]
    if not to_align:
        return links
    sources = [" ".join(splits[n].sources[k].split()) for n in to_align for k in kept[n]]
    targets = [" ".join(splits[n].targets[k].split()) for n in to_align for k in kept[n]]
    logger.info("xlpe-prepare: aligning %d pairs (forward + reverse, %s)", len(sources), options.symmetrization)
    if options.aligner == "eflomal":
        aligned = align_with_eflomal(sources, targets, options.symmetrization, **(options.eflomal_options or {}))
    else:
        aligned = [np.asarray(pair, dtype=np.int64).reshape(-1).tolist() for pair in options.aligner(sources, targets)]
    for name in to_align:
        links[name], aligned = aligned[: len(kept[name])], aligned[len(kept[name]) :]
    return links


def prepare_splits(splits: dict[str, ParallelSplit], tokenizer, **options):
    """Prepare several splits with one alignment run over all of them (eflomal learns from every split's text);
    options as `prepare_dataset`. Returns ({split: Dataset}, {split: report})."""
    return _prepare_splits(splits, tokenizer, PrepareOptions(**options))


def _prepare_splits(splits: dict[str, ParallelSplit], tokenizer, options: PrepareOptions):
    """Shared engine of `prepare_dataset` and `prepare_hf_dataset`; returns ({split: Dataset}, {split: report})."""
    import datasets

    fingerprint = _fingerprint(splits, tokenizer, options.describe())
    cached = _load_cache(options.cache_dir, fingerprint)
    if cached is not None:
        return cached
    timings, started = {}, time.perf_counter()
    kept, skipped = {}, {}
    for name, split in splits.items():
        kept[name], skipped[name] = _filter_pairs(split, options.max_length)
    timings["filter"] = time.perf_counter() - started
    if options.needs_links:
        links = _word_alignments(splits, kept, options)
        timings["align"] = time.perf_counter() - started - timings["filter"]
    else:
        links = {name: [[] for _ in keep] for name, keep in kept.items()}

    features_started = time.perf_counter()
    taggers = {side: _tagger(spec, options.nltk_data) for side, spec, feature in (
        ("source", options.source_tagger, "pos_tag_ids"), ("target", options.target_tagger, "decoder_pos_tag_ids"),
    ) if feature in options.features}  # fmt: skip  (built here, so that forked workers inherit them)
    if options.num_proc and options.num_proc > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked workers: no Rust thread pools there
    prepared, reports = {}, {}
    for name, split in splits.items():
        keep = kept[name]
        table = datasets.Dataset.from_dict(
            {"_line": [k + 1 for k in keep], "_source": [" ".join(split.sources[k].split()) for k in keep],
             "_target": [" ".join(split.targets[k].split()) for k in keep], "_links": links[name]},
            features=datasets.Features({"_line": datasets.Value("int64"), "_source": datasets.Value("string"),
                                        "_target": datasets.Value("string"),
                                        "_links": datasets.List(datasets.Value("int32"))}),
        )  # fmt: skip
        if len(table) == 0:  # nothing kept: no batch to run
            table = datasets.Dataset.from_dict({column: [] for column in _output_columns(options, name)})
        else:
            table = table.map(
                _compute_features, batched=True, batch_size=options.batch_size, remove_columns=table.column_names,
                num_proc=options.num_proc if len(table) > 1 else None, new_fingerprint=f"{fingerprint}-{name}",
                fn_kwargs=dict(tokenizer=tokenizer, options=options, keep_text=options.keeps_text(name)), desc=f"xlpe-prepare {name}",
            )  # fmt: skip
        reports[name], prepared[name] = _report_and_strip(table, split, skipped[name], options, taggers, fingerprint)
    timings["tokenize_reorder_tag"] = time.perf_counter() - features_started
    timings["total"] = time.perf_counter() - started
    for report in reports.values():
        report["timings_s"] = {stage: round(seconds, 3) for stage, seconds in timings.items()}
    _save_cache(options.cache_dir, fingerprint, prepared, reports)
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
        "xlpe_prepare_version": PREPARATION_VERSION, "fingerprint": fingerprint, "cache_hit": False,
        "source": split.source_origin, "target": split.target_origin,
        "alignments": split.alignment_origin or (options.describe()["aligner"] if options.needs_links else None),
        "pairs_read": len(split.sources), "pairs_kept": len(keep_rows), "pairs_skipped": dict(skipped),
        "pairs_skipped_total": sum(skipped.values()), "features": list(options.features),
        "options": options.describe(), "source_words": int(words.sum()),
    }  # fmt: skip
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
# Cache: keyed by the text, alignments, tokenizer and options
# ----------------------------------------------------------------------------------------------------------


def _tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = backend.to_str()
    else:
        state = json.dumps(sorted(tokenizer.get_vocab().items())) + repr(getattr(tokenizer, "init_kwargs", {}))
    return hashlib.sha256((type(tokenizer).__name__ + state).encode()).hexdigest()


def _fingerprint(splits: dict[str, ParallelSplit], tokenizer, described_options: dict) -> str:
    digest = hashlib.sha256(f"xlpe-prepare v{PREPARATION_VERSION}".encode())
    for name, split in splits.items():
        digest.update(name.encode())
        for texts in (split.sources, split.targets):
            digest.update("\n".join(texts).encode() + b"\0")
        digest.update(json.dumps(split.alignments).encode())
    digest.update(_tokenizer_fingerprint(tokenizer).encode())
    digest.update(json.dumps(described_options, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:20]


def _load_cache(cache_dir, fingerprint: str):
    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}" if cache_dir else None
    if path is None or not (path / "report.json").exists():
        return None
    import datasets

    logger.info("xlpe-prepare: cache hit %s", path)
    reports = json.loads((path / "report.json").read_text())
    for report in reports.values():
        report["cache_hit"] = True
    loaded = datasets.load_from_disk(str(path / "data"))
    return {name: loaded[name] for name in reports}, reports


def _save_cache(cache_dir, fingerprint: str, prepared: dict, reports: dict) -> None:
    if not cache_dir:
        return
    import datasets

    path = Path(cache_dir) / f"xlpe-prepare-{fingerprint}"
    staging = path.with_name(f"{path.name}.tmp{os.getpid()}")  # written aside, renamed when complete
    shutil.rmtree(staging, ignore_errors=True)
    datasets.DatasetDict(prepared).save_to_disk(str(staging / "data"))
    (staging / "report.json").write_text(json.dumps(reports, indent=2, ensure_ascii=False))
    if path.exists():  # a concurrent identical run finished first
        shutil.rmtree(staging)
    else:
        os.replace(staging, path)


# ----------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------


def prepare_dataset(sources: str | os.PathLike | Sequence[str], targets: str | os.PathLike | Sequence[str],
                    tokenizer, *, alignments: str | os.PathLike | Sequence | None = None, **options):  # fmt: skip
    """Prepare one parallel corpus; returns (`datasets.Dataset`, report dict).

    Args:
        sources, targets: paths of parallel UTF-8 files (plain or .gz) or lists of sentences.
        tokenizer: a Transformers tokenizer (`labels` come from `tokenizer(text_target=...)`).
        alignments: None (align with eflomal), a Pharaoh file path, or per pair links (Pharaoh strings, flat
            [i0, j0, ...] lists or (i, j) pairs), 0-based source-target word indices.
        features: subset of FEATURES; None = reorder/target positions, plus tags for each given tagger.
        aligner: "eflomal" or a callable(sources, targets) -> links per pair; eflomal_options: `eflomal.Aligner`
            keyword arguments (e.g. n_iterations, n_samplers).
        symmetrization: "grow-diag-final-and" (default), "grow-diag-final", "grow-diag", "intersection",
            "union", "forward", "reverse".
        unaligned: "right" (lader's default) or "left": where unaligned words attach in the BTG oracle.
        dpe_unaligned: "drop" (default, as the DPE code: -100, no loss) or "keep" (DPE paper prose: an unaligned
            token's target is its own index).
        source_tagger, target_tagger: tagger names ("nltk-en", "jieba-zh", "spacy:<model>") or `Tagger`s;
            nltk_data: extra nltk_data directory searched first.
        max_length: longest kept sequence in tokens (incl. </s>), per side; longer pairs are skipped, counted.
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
            split.alignments, split.alignment_origin = _validate_links(alignments, split), "<alignments>"
    prepared, reports = _prepare_splits({"train": split}, tokenizer, options)
    return prepared["train"], reports["train"]


def _validate_links(alignments, split: ParallelSplit) -> list[list[int]]:
    """Links given in memory (Pharaoh strings, flat lists or pairs), checked like a Pharaoh file."""
    if len(alignments) != len(split.sources):
        raise ValueError(f"{len(alignments)} alignments for {len(split.sources)} sentence pairs")
    return [
        parse_pharaoh_line(
            links if isinstance(links, str) else format_pharaoh(links if len(links) else np.zeros((0, 2))),
            len(s.split()), len(t.split()), "<alignments>", n,
        )
        for n, (links, s, t) in enumerate(zip(alignments, split.sources, split.targets), start=1)
    ]  # fmt: skip


def prepare_hf_dataset(name_or_path: str, tokenizer, *, source_lang: str, target_lang: str,
                       splits: Sequence[str] | None = None, config_name: str | None = None,
                       source_column: str | None = None, target_column: str | None = None, **options):  # fmt: skip
    """Prepare a Hub dataset id or a local `datasets` directory; returns (`DatasetDict`, {split: report}).
    All splits are word-aligned in one eflomal run. Options as for `prepare_dataset`."""
    import datasets

    options = PrepareOptions(**options)
    loaded = load_parallel_dataset(name_or_path, source_lang, target_lang, splits, config_name, source_column,
                                   target_column)  # fmt: skip
    prepared, reports = _prepare_splits(loaded, tokenizer, options)
    return datasets.DatasetDict(prepared), reports


# ----------------------------------------------------------------------------------------------------------
# Command line: xlpe-prepare
# ----------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xlpe-prepare", description=__doc__.split("\n\n")[0])
    src = p.add_argument_group("input (either --source/--target files or --dataset)")
    src.add_argument("--source", help="source-side text file, one sentence per line (.gz ok)")
    src.add_argument("--target", help="target-side text file, parallel to --source")
    src.add_argument("--alignments", help="Pharaoh i-j alignment file parallel to --source (default: run eflomal)")
    src.add_argument("--dataset", help="Hub dataset id or local datasets directory")
    src.add_argument("--dataset-config", help="dataset configuration name (e.g. de-en)")
    src.add_argument("--splits", nargs="+", help="splits to prepare (default: all)")
    src.add_argument("--source-lang", help="source language key in the dataset (e.g. en)")
    src.add_argument("--target-lang", help="target language key in the dataset (e.g. de)")
    src.add_argument("--source-column"), src.add_argument("--target-column")
    p.add_argument("--tokenizer", required=True, help="tokenizer directory or Hub id (AutoTokenizer)")
    p.add_argument("--output", required=True, help="directory for save_to_disk and report.json")
    p.add_argument("--features", nargs="+", choices=FEATURES, help="default: positions + tags of given taggers")
    p.add_argument("--symmetrization", default="grow-diag-final-and", choices=SYMMETRIZATIONS)
    p.add_argument("--eflomal-options", type=json.loads, default=None, metavar="JSON",
                   help='eflomal.Aligner arguments, e.g. \'{"n_samplers": 1}\'')  # fmt: skip
    p.add_argument("--unaligned", default="right", choices=("right", "left"), help="BTG oracle attachment")
    p.add_argument("--dpe-unaligned", default="drop", choices=("drop", "keep"), help="DPE unaligned tokens")
    p.add_argument("--source-tagger", help="nltk-en | jieba-zh | spacy:<model>")
    p.add_argument("--target-tagger", help="nltk-en | jieba-zh | spacy:<model>")
    p.add_argument("--nltk-data", help="extra nltk_data directory (offline NLTK tagger)")
    p.add_argument("--max-length", type=int, default=256, help="max tokens per side incl. </s> (default 256)")
    p.add_argument("--num-proc", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--cache-dir", help="reuse identical earlier runs from here")
    p.add_argument("--noise-ratio", type=float, default=0.0, help="XL PE Sec. 4.5 noise attack ratio")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-text", nargs="?", const="all", default="eval", choices=("all", "eval", "none"),
                   help="splits that keep text, line number and alignment columns: eval (default: every split but "
                        "train, what scoring needs), all (also --keep-text alone) or none")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `xlpe-prepare`: prepare, `save_to_disk(--output)`, write `--output/report.json` (one report
    for --source/--target, {split: report} for --dataset). Bad input exits with status 2 and the reason."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    options = dict(features=args.features, symmetrization=args.symmetrization, eflomal_options=args.eflomal_options,
                   unaligned=args.unaligned, dpe_unaligned=args.dpe_unaligned, source_tagger=args.source_tagger,
                   target_tagger=args.target_tagger, nltk_data=args.nltk_data, max_length=args.max_length,
                   num_proc=args.num_proc, batch_size=args.batch_size, cache_dir=args.cache_dir,
                   noise_ratio=args.noise_ratio, seed=args.seed, keep_text=args.keep_text)  # fmt: skip
    if bool(args.dataset) == bool(args.source or args.target):
        parser.error("give either --source and --target, or --dataset")
    if args.dataset and not (args.source_lang and args.target_lang):
        parser.error("--dataset needs --source-lang and --target-lang")
    if not args.dataset and not (args.source and args.target):
        parser.error("--source and --target go together")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        if args.dataset:
            data, report = prepare_hf_dataset(
                args.dataset, tokenizer, source_lang=args.source_lang, target_lang=args.target_lang,
                splits=args.splits, config_name=args.dataset_config, source_column=args.source_column,
                target_column=args.target_column, **options)  # fmt: skip
        else:
            data, report = prepare_dataset(args.source, args.target, tokenizer, alignments=args.alignments, **options)
    except (ValueError, LookupError, ImportError) as error:
        parser.exit(2, f"xlpe-prepare: error: {error}\n")
    output = Path(args.output)
    data.save_to_disk(str(output))
    (output / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    for name, split_report in (report.items() if args.dataset else [("", report)]):
        print(f"xlpe-prepare: {name or 'pairs'}: kept {split_report['pairs_kept']} of {split_report['pairs_read']}, "
              f"skipped {split_report['pairs_skipped']}", file=sys.stderr)  # fmt: skip
    print(f"xlpe-prepare: wrote {output} and {output / 'report.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
