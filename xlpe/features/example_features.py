"""Per-example features, computed inside `Dataset.map(batched=True)` (possibly in worker processes): tokenise
both sides with word ids, then per source token the oracle BTG order (`reorder_positions`, XL PE Sec. 3.1),
the DPE target ranks (`target_positions`, DPE Eq. 1), source POS tags, and per label token the target POS
tags; `PrepareOptions` holds every option that changes the result (it is part of the cache key)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .alignment import SYMMETRIZATIONS, format_pharaoh
from .reordering import (
    add_reordering_noise,
    dpe_target_positions,
    kendall_tau,
    oracle_xl_positions_flat,
    project_positions_to_subwords,
)
from .tagging import UNK_TAG_ID, Tagger, get_tagger, subword_tag_ids
from .tokenization import tokenize_with_word_ids

FEATURES = ("reorder_positions", "target_positions", "pos_tag_ids", "decoder_pos_tag_ids")
PREPARATION_VERSION = 3  # 3: Koehn-exact grow-diag (oracles change). Bump when the produced features change meaning (invalidates caches)
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
    def target_limit(self) -> int:
        """The longest kept target in tokens: `max_target_length`, or `max_length` when that is not given."""
        return self.max_length if self.max_target_length is None else self.max_target_length

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
                    eflomal_options=self.eflomal_options or {}, alignment_runs=self.alignment_runs,
                    keep_text=list(self.keep_text) if isinstance(self.keep_text, tuple) else self.keep_text,
                    **({} if self.max_target_length in (None, self.max_length) else
                       {"max_target_length": self.max_target_length}))  # fmt: skip  (earlier cache keys stay valid)


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
    limit, target_limit = options.max_length, options.target_limit
    out = {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        "_too_long": [
            "source_too_long" if len(s) > limit else "target_too_long" if len(t) > target_limit else ""
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
