"""Per-example features, computed inside `Dataset.map(batched=True)` (possibly in worker processes): tokenise
both sides with word ids, then per source token the oracle BTG order (`reorder_positions`, XL PE Sec. 3.1),
the DPE target ranks (`target_positions`, DPE Eq. 1), source POS tags, and per label token the target POS
tags; `PrepareOptions` holds every option that changes the result (it is part of the cache key). A batch is
computed at once on flat arrays (all pairs' tokens / words / links with offsets), not pair by pair.

The features are the extra inputs of the registry (`xlpe.models.registry`): the four built-in ones are computed
here; one registered with a `compute` function (`register_extra_input`) is computed by it from a `FeatureBatch`."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..models.registry import BUILTIN_FEATURES, EXTRA_INPUTS, extra_input_names, feature_computer
from ..models.taggers import tagger_help
from .alignment import SYMMETRIZATIONS
from .guided_links import subword_links_flat
from .reordering import (
    check_links_flat,
    dpe_target_positions_flat,
    kendall_tau_flat,
    oracle_xl_positions_flat,
    project_positions_to_subwords_flat,
    swap_noise_in_place,
)
from .tagging import UNK_TAG_ID, Tagger, get_tagger, subword_tag_ids_flat, tagger_identity
from .tokenization import tokenize_batch


def __getattr__(name: str):
    if name == "FEATURES":  # every registered extra input (the registry's, read when asked: plugins included)
        return extra_input_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PREPARATION_VERSION = (
    3  # 3: Koehn-exact grow-diag (oracles change). Bump when the produced features change meaning (invalidates caches)
)
_TAGGERS: dict[tuple, Tagger] = {}  # per process; built before `map` so forked workers inherit them


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
    max_length: int = 256  # longest kept source in tokens (incl. </s>); the target's too unless max_target_length
    max_target_length: int | None = None  # longest kept target in tokens (incl. </s>); None: max_length
    num_proc: int | None = None
    batch_size: int = 1000
    cache_dir: str | os.PathLike | None = None
    overwrite_cache: bool = False  # recompute even when cache_dir holds this preparation, and replace that entry
    noise_ratio: float = 0.0
    seed: int = 0
    eflomal_options: dict | None = None
    alignment_runs: int = 1  # eflomal runs voted over per direction (majority) before symmetrising; 1 = one run
    keep_text: bool | str | Sequence[str] = "eval"  # text columns for: True (every split), False (none), "eval"
    #   (every split but train: what scoring needs, small), or a list of split names

    def __post_init__(self):
        if self.features is None:
            self.features = ["reorder_positions", "target_positions"]
            self.features += ["pos_tag_ids"] if self.source_tagger else []
            self.features += ["decoder_pos_tag_ids"] if self.target_tagger else []
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in EXTRA_INPUTS]
        if unknown:
            raise ValueError(f"unknown features {unknown}; choose from {list(extra_input_names())}")
        uncomputable = [f for f in self.features if f not in BUILTIN_FEATURES and feature_computer(f) is None]
        if uncomputable:
            raise ValueError(
                f"features {uncomputable} are registered without a way to compute them: give `compute` to "
                "xlpe.models.registry.register_extra_input"
            )
        for feature, tagger, side in (
            ("pos_tag_ids", self.source_tagger, "source"),
            ("decoder_pos_tag_ids", self.target_tagger, "target"),
        ):
            if feature in self.features and not tagger:
                raise ValueError(f"{feature} needs {side}_tagger (one of {tagger_help(', ')})")
        if self.symmetrization not in SYMMETRIZATIONS:
            raise ValueError(f"unknown symmetrization {self.symmetrization!r}; choose from {list(SYMMETRIZATIONS)}")
        if self.unaligned not in ("right", "left"):
            raise ValueError(f"unaligned must be 'right' or 'left', got {self.unaligned!r}")
        if self.dpe_unaligned not in ("drop", "keep"):
            raise ValueError(f"dpe_unaligned must be 'drop' or 'keep', got {self.dpe_unaligned!r}")
        for name in ("max_length", "max_target_length"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 (tokens, </s> included), got {value!r}")
        if not 0.0 <= self.noise_ratio <= 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1], got {self.noise_ratio}")
        if not isinstance(self.alignment_runs, int) or isinstance(self.alignment_runs, bool) or self.alignment_runs < 1:
            raise ValueError(f"alignment_runs must be an integer >= 1, got {self.alignment_runs!r}")
        if not (self.aligner == "eflomal" or callable(self.aligner)):
            raise ValueError(f"aligner must be 'eflomal' or a callable, got {self.aligner!r}")
        self.nltk_data = None if self.nltk_data is None else str(self.nltk_data)
        if isinstance(self.keep_text, str) and self.keep_text not in ("eval", "all", "none"):
            raise ValueError(
                f"keep_text must be True, False, 'eval', 'all', 'none' or a list of split names, got {self.keep_text!r}"
            )
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
    def target_limit(self) -> int:
        """The longest kept target in tokens: `max_target_length`, or `max_length` when that is not given."""
        return self.max_length if self.max_target_length is None else self.max_target_length

    @property
    def needs_links(self) -> bool:
        return any(f in self.features for f in ("reorder_positions", "target_positions", "alignment_links"))

    def describe(self) -> dict:
        """The options that change the result, JSON-able (for the report and the cache key)."""

        def name(x):  # taggers and aligners given as objects are described by their name
            if x is None or isinstance(x, str):
                return tagger_identity(x)  # (a trained tagger file: name + content digest)
            return getattr(x, "name", getattr(x, "__name__", type(x).__name__))

        return dict(
            features=list(self.features),
            aligner=name(self.aligner),
            symmetrization=self.symmetrization,
            unaligned=self.unaligned,
            dpe_unaligned=self.dpe_unaligned,
            source_tagger=name(self.source_tagger),
            target_tagger=name(self.target_tagger),
            max_length=self.max_length,
            noise_ratio=self.noise_ratio,
            seed=self.seed,
            eflomal_options=self.eflomal_options or {},
            alignment_runs=self.alignment_runs,
            keep_text=list(self.keep_text) if isinstance(self.keep_text, tuple) else self.keep_text,
            **(
                {}
                if self.max_target_length in (None, self.max_length)
                else {"max_target_length": self.max_target_length}
            ),
        )  # earlier cache keys stay valid


# ----------------------------------------------------------------------------------------------------------
# Per-batch features (runs inside `Dataset.map`, possibly in worker processes)
# ----------------------------------------------------------------------------------------------------------


@dataclass
class FeatureBatch:
    """What a registered feature's `compute(batch)` gets: the texts, both sides tokenised (`TokenizedBatch`: flat
    ids / word ids with offsets), the word alignment links (flat, one entry per link) and the options. It returns
    one list of ints per pair, as long as that pair's tokens on the feature's side (`ExtraInput.side`)."""

    sources: list[str]
    targets: list[str]
    source: Any  # TokenizedBatch of the sources
    target: Any  # TokenizedBatch of the targets (labels)
    link_sentence: np.ndarray  # pair of each link
    link_source: np.ndarray  # source word of each link (index within its sentence)
    link_target: np.ndarray  # target word of each link
    options: PrepareOptions


def _registered_feature(name: str, batch: FeatureBatch) -> pa.ListArray:
    """A registered (not built-in) feature, computed by its `compute` and checked against its side's lengths."""
    values = feature_computer(name)(batch)
    tokens = batch.source if EXTRA_INPUTS[name].side == "source" else batch.target
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if len(values) != len(tokens) or not np.array_equal(lengths, tokens.lengths):
        raise ValueError(f"feature {name!r}: compute() must give one value per {EXTRA_INPUTS[name].side} token")
    flat = np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64, count=int(lengths.sum()))
    return _list_column(flat, tokens.offsets)


def _tagger(spec: str | Tagger, nltk_data: str | None) -> Tagger:
    """One tagger instance per (name, data path) and process."""
    if isinstance(spec, Tagger):
        return spec
    key = (spec, nltk_data)  # any tagger may use the NLTK data directory
    if key not in _TAGGERS:
        _TAGGERS[key] = get_tagger(spec, **({"nltk_data": nltk_data} if nltk_data else {}))
    return _TAGGERS[key]


def _batch_inputs(batch) -> tuple[list[str], list[str], pa.Array, np.ndarray, np.ndarray]:
    """(sources, targets, lines, link counts per pair, flat links [i0, j0, i1, j1, ...]) of a `map` batch: read
    straight from its Arrow table when `map` hands one over (a `LazyBatch`), else from Python lists."""
    table = getattr(batch, "pa_table", None)
    if isinstance(table, pa.Table):
        links = table.column("_links").combine_chunks()
        links = links.cast(pa.list_(pa.int64())) if len(links) else pa.array([], type=pa.list_(pa.int64()))
        counts = links.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = links.flatten().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        return (
            table.column("_source").to_pylist(),
            table.column("_target").to_pylist(),
            table.column("_line").combine_chunks().cast(pa.int64()),
            counts,
            flat,
        )
    links = batch["_links"]
    counts = np.fromiter(map(len, links), dtype=np.int64, count=len(links))
    flat = np.fromiter(itertools.chain.from_iterable(links), dtype=np.int64, count=int(counts.sum()))
    return list(batch["_source"]), list(batch["_target"]), pa.array(batch["_line"], type=pa.int64()), counts, flat


def _list_column(values: np.ndarray, offsets: np.ndarray, dtype=np.int64) -> pa.ListArray:
    """A list column from flat values + offsets, of the type `datasets` gives lists of Python ints: int64, but
    int32 for `input_ids` and int8 for `attention_mask` (its `OptimizedTypedSequence`, when the values fit)."""
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values.astype(dtype, copy=False)))


def _fits_int32(values: np.ndarray) -> bool:
    info = np.iinfo(np.int32)
    return not len(values) or (info.min <= int(values.min()) and int(values.max()) <= info.max)


def _pharaoh_strings(link_source: np.ndarray, link_target: np.ndarray, link_offsets: np.ndarray) -> pa.Array:
    """`format_pharaoh` of every pair ("i-j i-j ..."), built by Arrow compute kernels."""
    pairs = pc.binary_join_element_wise(
        pc.cast(pa.array(link_source), pa.string()), pc.cast(pa.array(link_target), pa.string()), "-"
    )
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(link_offsets.astype(np.int32)), pairs), " ")


@contextlib.contextmanager
def _cyclic_gc_paused():
    """No cyclic garbage collection inside the block (reference counting still frees everything acyclic). The
    tokenizer call allocates ~10k container objects per 1,000 pairs, and the collections they trigger took ~10%
    of the feature step (measured with `gc.callbacks`); the collector runs again, once, after the block."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compute_features(batch, tokenizer, options: PrepareOptions, keep_text: bool = False) -> pa.Table:
    """Tokenise a batch of pairs and compute the requested features plus `_`-prefixed statistics columns.

    Whole-batch numpy over flat arrays (the tokens, words and links of all pairs, with offsets), no per-token
    Python: one tokenizer call per side, then the flat versions of the per-sentence functions (equal to them
    pair by pair). Returns an Arrow table with the column types `datasets` infers from Python lists (list<int64>;
    list<int32> `input_ids` and list<int8> `attention_mask`, its integer optimisation), which `Dataset.map`
    writes as it is. Per pair in Python only: the noise attack (one seeded generator per line, so the draws do
    not depend on the batching) and the taggers."""
    sources, targets, lines, link_counts, flat_links = _batch_inputs(batch)
    if np.any(link_counts % 2):
        raise ValueError("links must be flat [i0, j0, i1, j1, ...] lists (an even number of indices per pair)")
    with _cyclic_gc_paused():
        source = tokenize_batch(tokenizer, sources)
        target = tokenize_batch(tokenizer, targets, target=True)
    word_offsets = np.r_[0, np.cumsum(source.num_words)]  # sentence s owns words word_offsets[s]:word_offsets[s+1]
    too_long = np.where(
        source.lengths > options.max_length,
        "source_too_long",
        np.where(target.lengths > options.target_limit, "target_too_long", ""),
    )
    out = {
        "input_ids": _list_column(source.ids, source.offsets, np.int32 if _fits_int32(source.ids) else np.int64),
        "attention_mask": _list_column(np.ones(len(source.ids), dtype=np.int8), source.offsets, np.int8),
        "labels": _list_column(target.ids, target.offsets),
        "_too_long": pa.array(too_long.tolist(), type=pa.string()),
        "_words": pa.array(source.num_words),
    }
    link_sentence = np.repeat(np.arange(len(sources), dtype=np.int64), link_counts // 2)  # one entry per link
    link_source, link_target = flat_links[0::2], flat_links[1::2]
    if options.needs_links:
        check_links_flat(link_sentence, link_source, link_target, word_offsets)
        oracle = oracle_xl_positions_flat(
            link_sentence, link_source, link_target, source.num_words, unaligned=options.unaligned
        )
        out["_unaligned"] = pa.array(oracle.unaligned_words)
        out["_repaired"] = pa.array(oracle.repaired)
        out["_tau"] = pa.array(np.where(source.num_words > 1, kendall_tau_flat(oracle.positions, word_offsets), np.nan))
        if "reorder_positions" in options.features:
            word_positions = oracle.positions
            if options.noise_ratio > 0:  # XL PE Sec. 4.5, on word indices so that sub-words still move together
                word_positions = word_positions.copy()
                for s, line in enumerate(lines.to_pylist()):
                    swap_noise_in_place(
                        word_positions[word_offsets[s] : word_offsets[s + 1]],
                        options.noise_ratio,
                        np.random.default_rng([options.seed, line]),
                    )
            reorder = project_positions_to_subwords_flat(word_positions, word_offsets, source.word_ids, source.offsets)
            out["reorder_positions"] = _list_column(reorder, source.offsets)
        if "target_positions" in options.features:
            ranks = dpe_target_positions_flat(
                link_sentence,
                link_source,
                link_target,
                word_offsets,
                source.word_ids,
                source.offsets,
                unaligned=options.dpe_unaligned,
            )
            out["target_positions"] = _list_column(ranks, source.offsets)
        if "alignment_links" in options.features:
            values, offsets = subword_links_flat(
                link_sentence,
                link_source,
                link_target,
                word_offsets,
                np.r_[0, np.cumsum(target.num_words)],
                source.word_ids,
                source.offsets,
                target.word_ids,
                target.offsets,
            )
            out["alignment_links"] = _list_column(values, offsets)
    for feature, spec, texts, tokens in (
        ("pos_tag_ids", options.source_tagger, sources, source),
        ("decoder_pos_tag_ids", options.target_tagger, targets, target),
    ):
        if feature in options.features:
            tagger = _tagger(spec, options.nltk_data)
            tags = tagger.tag([t.split() for t in texts])
            word_tag_ids = [tagger.vocabulary.encode(t) for t in tags]
            flat_tags = np.fromiter(itertools.chain.from_iterable(word_tag_ids), dtype=np.int64)
            tag_offsets = np.r_[0, np.cumsum([len(t) for t in word_tag_ids], dtype=np.int64)]
            token_tags = subword_tag_ids_flat(flat_tags, tag_offsets, tokens.word_ids, tokens.offsets)
            out[feature] = _list_column(token_tags, tokens.offsets)
            out[f"_unknown_{feature}"] = pa.array(
                [[t for t, i in zip(ts, ids) if i == UNK_TAG_ID] for ts, ids in zip(tags, word_tag_ids)],
                type=pa.list_(pa.string()),
            )
    for feature in options.features:
        if feature not in BUILTIN_FEATURES:
            batch_view = FeatureBatch(
                sources, targets, source, target, link_sentence, link_source, link_target, options
            )
            out[feature] = _registered_feature(feature, batch_view)
    if keep_text:
        link_offsets = np.r_[0, np.cumsum(link_counts // 2)]
        out.update(
            line=lines,
            source_text=pa.array(sources, type=pa.string()),
            target_text=pa.array(targets, type=pa.string()),
            word_alignment=_pharaoh_strings(link_source, link_target, link_offsets),
        )
    return pa.table(out)
