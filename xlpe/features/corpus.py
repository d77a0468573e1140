"""Parallel text in: a `ParallelSplit` per split, read from parallel files (plain or .gz) or a Hub / local
`datasets` dataset, with optional Pharaoh alignments checked against the sentences; the cleaning step that
skips empty and over-long pairs (counted by reason, never dropped silently)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .alignment import format_pharaoh, parse_pharaoh_line, read_pharaoh_file
from .text_files import read_text_lines

SKIP_REASONS = ("empty_source", "empty_target", "source_too_long", "target_too_long")


@dataclass
class ParallelSplit:
    """One split of raw sentence pairs, with where each side came from (for error messages and the report)."""

    sources: list[str]
    targets: list[str]
    source_origin: str
    target_origin: str
    alignments: list[list[int]] | None = None  # flat Pharaoh links per pair, already validated
    alignment_origin: str | None = None
    line_offset: int = 0  # lines of the files before sources[0] (a shard of a larger corpus): line k is k+1+offset


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
        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as error:  # noqa: BLE001  (a damaged directory: Arrow, JSON or file errors, named in one line)
            raise ValueError(
                f"{path}: a damaged datasets directory, it does not load ({type(error).__name__}: "
                f"{' '.join(str(error).split())[:300]})"
            ) from None
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
# Cleaning and in-memory alignments
# ----------------------------------------------------------------------------------------------------------


def filter_pairs(
    split: ParallelSplit, max_length: int, max_target_length: int | None = None
) -> tuple[list[int], Counter]:
    """Indices of pairs to keep, and the skip counts. More than max_length source words (max_target_length
    target words; default max_length) is over-long for sure (every word is at least one token); pairs over-long
    only in tokens are caught after tokenisation."""
    target_limit = max_length if max_target_length is None else max_target_length
    skipped = Counter({reason: 0 for reason in SKIP_REASONS})
    keep = []
    for k, (source, target) in enumerate(zip(split.sources, split.targets)):
        n, m = len(source.split()), len(target.split())
        reason = (
            "empty_source"
            if n == 0
            else "empty_target"
            if m == 0
            else "source_too_long"
            if n > max_length
            else "target_too_long"
            if m > target_limit
            else None
        )
        if reason:
            skipped[reason] += 1
        else:
            keep.append(k)
    return keep, skipped


def validate_links(alignments, split: ParallelSplit) -> list[list[int]]:
    """Links given in memory (Pharaoh strings, flat lists or pairs), checked like a Pharaoh file."""
    if len(alignments) != len(split.sources):
        raise ValueError(f"{len(alignments)} alignments for {len(split.sources)} sentence pairs")
    return [
        parse_pharaoh_line(
            links if isinstance(links, str) else format_pharaoh(links if len(links) else np.zeros((0, 2))),
            len(s.split()),
            len(t.split()),
            "<alignments>",
            n,
        )
        for n, (links, s, t) in enumerate(zip(alignments, split.sources, split.targets), start=1)
    ]
