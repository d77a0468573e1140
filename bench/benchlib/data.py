"""Data the benchmarks use: where the shared data lives (`$XLPE_SHARED_DIR`, default ../shared beside the
repository) and Multi30k slices; the timing batches live in `speed_models.py` and `lengths.py`."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("XLPE_SHARED_DIR", REPO.parent / "shared")) / "data"
MULTI30K = DATA / "multi30k"
NLTK_DATA = DATA / "nltk_data"
HANSARDS = DATA / "word_alignment_gold" / "enfr_hansards"


def multi30k_split(split: str, lang: str, limit: int, tokenized: bool) -> list[str]:
    from xlpe.features.alignment import read_text_lines

    path = MULTI30K / ("tok" if tokenized else "raw") / (f"{split}.lc.norm.tok.{lang}.gz" if tokenized else f"{split}.{lang}.gz")
    return read_text_lines(path)[:limit]
