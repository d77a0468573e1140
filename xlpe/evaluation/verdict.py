"""The project's seed rule: when does one system beat another?

A difference between two systems trained the same way holds only when the paired test (sacrebleu's paired bootstrap,
`xlpe.evaluation.metrics.paired_significance`, run per seed against the baseline of the same seed) finds it
significant (p < 0.05) in every seed, with one sign; anything else is *within noise*. One seed is indicative only.
`bench/benchlib/reproduction_report.py` (the benchmark tables) and `xlpe.training.compare` (`xlpe-compare`) read
this one copy.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

ALPHA = 0.05


def seed_rule(deltas: Sequence[float], pvalues: Sequence[float], alpha: float = ALPHA) -> dict:
    """{"outcome": "better" | "worse" | "within noise", "significant": seeds with p < alpha, "seeds", "text"} for
    per-seed differences `deltas` (system - baseline) and their paired-test `pvalues` (the same seeds, in order)."""
    if len(deltas) != len(pvalues):
        raise ValueError(f"deltas and pvalues must have one value per seed, got {len(deltas)} and {len(pvalues)}")
    significant = sum(p < alpha for p in pvalues)
    same_sign = all(d > 0 for d in deltas) or all(d < 0 for d in deltas)
    holds = bool(pvalues) and significant == len(pvalues) and same_sign
    outcome = ("better" if statistics.mean(deltas) > 0 else "worse") if holds else "within noise"
    text = (
        f"{outcome} (significant in {significant}/{len(pvalues)} seeds, p<{alpha:g})"
        if holds
        else f"within noise (significant in {significant}/{len(pvalues)} seeds)"
    )
    if len(pvalues) == 1:
        text += "; one seed: indicative only"
    return {"outcome": outcome, "significant": significant, "seeds": len(pvalues), "text": text}


def verdict_of(deltas: Sequence[float], pvalues: Sequence[float]) -> str:
    """The seed rule's verdict in words (`seed_rule`'s "text"), as the benchmark tables print it."""
    return seed_rule(deltas, pvalues)["text"]


__all__ = ["ALPHA", "seed_rule", "verdict_of"]
