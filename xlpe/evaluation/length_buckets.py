"""BLEU and chrF by source length: each bucket of sentences scored as its own corpus (sacrebleu, with signatures).

Relative position forms are reported equal to absolute PE overall but better on sentences longer than any seen in
training (Rosendahl et al., IWSLT 2019); a corpus score hides that, a score per source-length bucket shows it.
Lengths are counted in text units (`source_length`: words; characters in Chinese, Japanese, Thai, ...).
Buckets are named by their range of source lengths: edges (10, 20, 30, 40, 50) give "1-10", "11-20", "21-30",
"31-40", "41-50" and "51+". Every bucket is reported, an empty one with 0 sentences and no score; sources of
length 0 (empty lines) belong to no bucket and are counted (`empty_sources`). `xlpe-evaluate bleu --source S
--length_buckets [EDGES]` runs it (docs/evaluation.md, "Length buckets").
"""

from __future__ import annotations

from collections.abc import Sequence

from ..features.text_units import unit_count
from .metrics import _reference_streams, corpus_bleu_chrf

DEFAULT_EDGES = (10, 20, 30, 40, 50)
LENGTH_UNIT = "text units: whitespace words, one per character of Chinese, Japanese, Thai, ... (text_units.py)"


def source_length(line: str) -> int:
    """A source sentence's length in text units (`xlpe.features.text_units.unit_count`): whitespace words, and one
    unit per character of a script written without spaces (Chinese, Japanese, Thai, Lao, Khmer, Myanmar)."""
    return unit_count(line)


def parse_edges(text: str | Sequence[int]) -> tuple[int, ...]:
    """Bucket edges from "10,20,30" (or a sequence of ints): strictly increasing integers >= 1, the last bucket
    open-ended. A ValueError naming `--length_buckets` otherwise."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        edges = tuple(int(str(item).strip()) for item in items)
    except ValueError:
        raise ValueError(
            f"--length_buckets must be comma-separated integers (bucket upper edges, e.g. 10,20,30), got {text!r}"
        ) from None
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"--length_buckets must be strictly increasing integers >= 1, got {text!r}")
    return edges


def bucket_names(edges: Sequence[int]) -> list[str]:
    """["1-10", "11-20", ..., "51+"] for edges (10, 20, ..., 50)."""
    lows = [1, *(edge + 1 for edge in edges)]
    return [f"{low}-{high}" if low != high else str(low) for low, high in zip(lows, edges)] + [f"{lows[-1]}+"]


def bucket_index(length: int, edges: Sequence[int]) -> int:
    """The bucket of a length >= 1: the first edge >= length, or the open last bucket."""
    return next((i for i, edge in enumerate(edges) if length <= edge), len(edges))


def length_bucket_scores(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    edges: Sequence[int] = DEFAULT_EDGES,
    target_language: str | None = None,
    tokenize: str | None = None,
    lowercase: bool = False,
) -> dict:
    """{"unit", "edges", "buckets": [{"name", "min", "max" (None: open), "sentences", "bleu", "chrf"}, ...],
    "empty_sources"}: each bucket's sentences scored as a corpus by `corpus_bleu_chrf` (score and signature; None
    for an empty bucket). `sources` are parallel to `hypotheses` and to every reference stream."""
    edges = parse_edges(edges)
    if len(sources) != len(hypotheses):
        raise ValueError(f"sources and hypotheses must be parallel: {len(sources)} != {len(hypotheses)} lines")
    streams = _reference_streams(references, len(hypotheses))
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    empty = 0
    for row, source in enumerate(sources):
        length = source_length(source)
        if length == 0:
            empty += 1
        else:
            members[bucket_index(length, edges)].append(row)
    buckets = []
    for index, (name, rows) in enumerate(zip(bucket_names(edges), members)):
        bucket = {
            "name": name,
            "min": 1 if index == 0 else edges[index - 1] + 1,
            "max": edges[index] if index < len(edges) else None,
            "sentences": len(rows),
            "bleu": None,
            "chrf": None,
        }
        if rows:
            scores = corpus_bleu_chrf(
                [hypotheses[row] for row in rows],
                [[stream[row] for row in rows] for stream in streams],
                target_language,
                tokenize,
                lowercase,
            )
            bucket.update(bleu=scores["bleu"], chrf=scores["chrf"])
        buckets.append(bucket)
    return {"unit": LENGTH_UNIT, "edges": list(edges), "buckets": buckets, "empty_sources": empty}


__all__ = [
    "DEFAULT_EDGES",
    "bucket_index",
    "bucket_names",
    "length_bucket_scores",
    "parse_edges",
    "source_length",
]
