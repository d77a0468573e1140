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
    import random

    by_english: dict[str, list[str]] = {}
    with gzip.open(TATOEBA_CMN_ENG, "rt", encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
                by_english.setdefault(fields[0].strip(), []).append(fields[1].strip())
    english = sorted(by_english)
    random.Random(seed).shuffle(english)
    segment = _jieba_words()
    splits, start = {}, 0
    for name, size in (("test", test), ("validation", val)):
        chosen = english[start : start + size]
        start += size
        splits[name] = ([segment(by_english[e][0]) for e in chosen], chosen)
    pairs = [(segment(zh), e) for e in english[start:] for zh in by_english[e]][:train]
    splits["train"] = ([zh for zh, _ in pairs], [e for _, e in pairs])
    return splits


WMT_NEWSTEST = DATA / "wmt_newstest_tatoeba_testsets"
# the WMT news test sets of a pair as one out-of-domain corpus (the fine-tuning study's pretraining text): pair ->
# (folder, source suffix, target suffix, the held-out set (its out-of-domain test and validation), sets left out).
# de-en leaves out newstest2020 (document-level: paragraphs, not sentences, as benchlib/lengths.py does)
WMT_OUT_OF_DOMAIN = {
    "de-en": ("deu-eng", "deu", "eng", "newstest2014", ("newstest2020",)),
    "zh-en": ("zho-eng", "zho", "eng", "newstest2019", ()),
}


def wmt_newstest_splits(pair: str, train: int, val: int, test: int) -> dict[str, tuple[list[str], list[str]]]:
    """{split: (sources, targets)} of `pair`'s WMT news test sets (WMT_OUT_OF_DOMAIN): test = the first `test` lines
    of the held-out set, validation = its next `val` lines, train = every other news set (file order, at most
    `train` pairs). Chinese is segmented into words by jieba, as `tatoeba_cmn_eng_splits` does."""
    from xlpe.features.alignment import read_text_lines

    folder, source, target, held_out, left_out = WMT_OUT_OF_DOMAIN[pair]
    segment = (lambda text: text) if source != "zho" else _jieba_words()
    by_set = {}
    for path in sorted((WMT_NEWSTEST / folder).glob(f"*.{source}.gz")):
        name = path.name.removesuffix(f".{source}.gz")
        if name.startswith("tatoeba") or name in left_out:
            continue
        sources, targets = read_text_lines(path), read_text_lines(path.with_name(f"{name}.{target}.gz"))
        if len(sources) != len(targets):
            raise ValueError(f"{path}: {len(sources)} lines against {len(targets)} in its {target} file")
        by_set[name] = ([segment(s) for s in sources], targets)
    held_sources, held_targets = by_set.pop(held_out)
    train_pairs = [pair_ for name in by_set for pair_ in zip(*by_set[name])][:train]
    return {
        "train": ([s for s, _ in train_pairs], [t for _, t in train_pairs]),
        "validation": (held_sources[test : test + val], held_targets[test : test + val]),
        "test": (held_sources[:test], held_targets[:test]),
    }


# the news walk-through (docs/benchmarks/recipe.md): 12,000 de->en training pairs of the news test sets 2008-2012 in
# this order (newssyscomb2009 left out), 500 validation lines of newstest2013, 1,000 test lines of newstest2014
NEWS_WALKTHROUGH_TRAIN_SETS = ("news-test2008", "newstest2009", "newstest2010", "newstest2011", "newstest2012")


def write_news_walkthrough(folder: Path, train: int = 12_000, val: int = 500, test: int = 1_000) -> dict[str, int]:
    """Write the news walk-through's raw text files (`train.de`, `train.en`, `dev.*`, `test.*`) into `folder`, as a
    user's own files are; returns the lines per split."""
    from xlpe.features.alignment import read_text_lines

    base = WMT_NEWSTEST / "deu-eng"

    def lines(name: str, side: str) -> list[str]:
        return read_text_lines(base / f"{name}.{side}.gz")

    splits = {
        "train": tuple(
            [line for name in NEWS_WALKTHROUGH_TRAIN_SETS for line in lines(name, side)][:train]
            for side in ("deu", "eng")
        ),
        "dev": tuple(lines("newstest2013", side)[:val] for side in ("deu", "eng")),
        "test": tuple(lines("newstest2014", side)[:test] for side in ("deu", "eng")),
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, (sources, targets) in splits.items():
        if len(sources) != len(targets):
            raise ValueError(f"news walk-through {split}: {len(sources)} German lines against {len(targets)} English")
        (folder / f"{split}.de").write_text("".join(f"{line}\n" for line in sources), encoding="utf-8")
        (folder / f"{split}.en").write_text("".join(f"{line}\n" for line in targets), encoding="utf-8")
    return {split: len(pairs[0]) for split, pairs in splits.items()}


def _jieba_words():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    return lambda text: " ".join(word for word in jieba.lcut(text) if word.strip())
