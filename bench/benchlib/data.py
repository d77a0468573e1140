"""Data the benchmarks use: where the shared data lives (`$XLPE_SHARED_DIR`, default ../shared beside the
repository) and Multi30k slices; the timing batches live in `speed_models.py` and `lengths.py`."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("XLPE_SHARED_DIR", REPO.parent / "shared")) / "data"
MULTI30K = DATA / "multi30k"
NLTK_DATA = DATA / "nltk_data"
UD_GERMAN_GSD = DATA / "ud_german_gsd"  # dev + test CoNLL-U only: the German tagger's training data
HANSARDS = DATA / "word_alignment_gold" / "enfr_hansards"


def multi30k_split(split: str, lang: str, limit: int, tokenized: bool) -> list[str]:
    from xlpe.features.alignment import read_text_lines

    path = (
        MULTI30K
        / ("tok" if tokenized else "raw")
        / (f"{split}.lc.norm.tok.{lang}.gz" if tokenized else f"{split}.{lang}.gz")
    )
    return read_text_lines(path)[:limit]


SMALL_PARALLEL_ENJA = DATA / "small_parallel_enja"
TATOEBA_CMN_ENG = DATA / "tatoeba_manythings_cmn_eng" / "cmn.txt.gz"


def small_parallel_enja_split(split: str, lang: str, limit: int) -> list[str]:
    """small_parallel_enja (Tanaka corpus): lowercased English, KyTea-segmented Japanese; train / dev / test."""
    from xlpe.features.alignment import read_text_lines

    name = f"{split}.{lang}.gz" if split == "train" else f"{split}.{lang}"
    return read_text_lines(SMALL_PARALLEL_ENJA / name)[:limit]


def tatoeba_cmn_eng_splits(train: int, val: int, test: int, seed: int = 0) -> dict[str, tuple[list[str], list[str]]]:
    """ManyThings/Tatoeba cmn-eng as {split: (chinese, english)}, Chinese segmented into words by jieba (the unit of
    alignment and of the XL oracle). The file has no split: its English sentences (many with several Chinese
    translations) are shuffled with `seed` and split by English sentence, so no test reference is seen in
    training; test and validation keep one pair per English sentence (single reference), training keeps all."""
    import gzip
    import logging
    import random

    import jieba

    jieba.setLogLevel(logging.WARNING)
    by_english: dict[str, list[str]] = {}
    with gzip.open(TATOEBA_CMN_ENG, "rt", encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
                by_english.setdefault(fields[0].strip(), []).append(fields[1].strip())
    english = sorted(by_english)
    random.Random(seed).shuffle(english)
    segment = lambda text: " ".join(word for word in jieba.lcut(text) if word.strip())  # noqa: E731
    splits, start = {}, 0
    for name, size in (("test", test), ("validation", val)):
        chosen = english[start : start + size]
        start += size
        splits[name] = ([segment(by_english[e][0]) for e in chosen], chosen)
    pairs = [(segment(zh), e) for e in english[start:] for zh in by_english[e]][:train]
    splits["train"] = ([zh for zh, _ in pairs], [e for _, e in pairs])
    return splits
