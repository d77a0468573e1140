"""Markdown helpers shared by the drivers: mean ± std over seeds, the dates runs finished, and replacing
one `## Section` of BENCHMARKS.md while leaving every other section as it is."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def run_dates(records: list[dict]) -> str:
    """First and last day the runs finished (records written before dates were kept: their hypotheses file's)."""
    days = sorted(
        {r.get("date") or time.strftime("%Y-%m-%d", time.localtime(os.path.getmtime(r["hypotheses"]))) for r in records}
    )
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def replace_section(path: Path, heading: str, section: str) -> None:
    """Replace the `## heading` section of the Markdown file `path` by `section` (which starts with that
    heading), or append it at the end; nothing else in the file changes. Re-reads the file just before editing."""
    text = path.read_text(encoding="utf-8")
    start = text.find(f"\n## {heading}\n")  # the whole heading line: "## Reproduction" is not "## Reproduction: ..."
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[: start + 1] + section + (text[end:] if end != -1 else "")
    path.write_text(text, encoding="utf-8")
