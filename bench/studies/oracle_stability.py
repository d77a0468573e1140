"""How stable is the oracle BTG order that XL PE trains on? (issue 17, item 0)

eflomal samples (unseeded by default), so two alignment runs of the same corpus give different links and therefore
different oracles; `--seed N` seeds both (`eflomal_options={"seed": N}`), which should make them equal. For each
language pair this aligns the same training slice twice, independently, with `alignment_runs` K = 1, 3, 5 (K runs per
direction, links kept by a strict majority), and reports how much the two resulting word-level oracles agree: mean
Kendall τ between them, the share of sentences whose oracle is identical, and the alignment time. It also measures the
symmetrisation change of this release: Koehn's reference grow-diag-final-and against the previous loop, on the same
directional links.

    python bench/studies/oracle_stability.py --pairs en-ja,de-en --limit 10000 --runs 1,3,5
    python bench/studies/oracle_stability.py --pairs en-ja --limit 10000 --runs 1 --seed 0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [
    str(Path(__file__).resolve().parents[2]),
    str(Path(__file__).resolve().parents[1]),
]  # checkout; benchlib

from benchlib.data import DATA  # noqa: E402

from xlpe.features.alignment import (  # noqa: E402
    _NEIGHBOURS,
    _as_pairs,
    align_with_eflomal,
    eflomal_directional,
    read_text_lines,
    symmetrize,
)
from xlpe.features.reordering import kendall_tau, oracle_xl_positions_batch  # noqa: E402

CORPORA = {  # pair -> (source file, target file) of a training split in the shared data (tokenised text)
    "en-ja": (DATA / "small_parallel_enja" / "train.en.gz", DATA / "small_parallel_enja" / "train.ja.gz"),
    "de-en": (
        DATA / "multi30k" / "tok" / "train.lc.norm.tok.de.gz",
        DATA / "multi30k" / "tok" / "train.lc.norm.tok.en.gz",
    ),
}


def oracles(links, sources) -> list[list[int]]:
    lengths = [len(s.split()) for s in sources]
    batch = oracle_xl_positions_batch(links, lengths)
    return [batch[k].tolist() for k in range(len(sources))]


def agreement(first: list[list[int]], second: list[list[int]]) -> tuple[float, float]:
    """(mean Kendall τ between the two oracles over sentences of 2+ words, share of identical oracles)."""
    taus = [kendall_tau(a, b) for a, b in zip(first, second) if len(a) > 1]
    return statistics.mean(taus), sum(a == b for a, b in zip(first, second)) / len(first)


def previous_grow_diag_final_and(forward, reverse) -> set:
    """The symmetrisation loop of xlpe 0.1 (sweeps candidate links in (i, j) order), for the comparison."""
    forward, reverse = set(_as_pairs(forward)), set(_as_pairs(reverse))
    alignment = forward & reverse
    src, tgt = {i for i, _ in alignment}, {j for _, j in alignment}
    candidates, grew = sorted((forward | reverse) - alignment), True
    while grew and candidates:
        grew, remaining = False, []
        for i, j in candidates:
            if (i not in src or j not in tgt) and not alignment.isdisjoint([(i + a, j + b) for a, b in _NEIGHBOURS]):
                alignment.add((i, j)), src.add(i), tgt.add(j)
                grew = True
            else:
                remaining.append((i, j))
        candidates = remaining
    for direction in (forward, reverse):
        for i, j in sorted(direction - alignment):
            if i not in src and j not in tgt:
                alignment.add((i, j)), src.add(i), tgt.add(j)
    return alignment


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="en-ja,de-en")
    parser.add_argument("--limit", type=int, default=10000, help="training pairs per language pair")
    parser.add_argument("--runs", default="1,3,5", help="alignment_runs values to compare")
    parser.add_argument("--seed", type=int, default=None, help="seed both alignments with this (eflomal_options seed)")
    args = parser.parse_args(argv)
    seeded = {} if args.seed is None else {"seed": args.seed}
    print(
        "| pair | pairs | alignment runs K | oracle vs oracle: mean Kendall τ | identical oracles "
        "| seconds per alignment |"
    )
    print("|---|---|---|---|---|---|")
    symmetrisation_rows = []
    for pair in args.pairs.split(","):
        source_file, target_file = CORPORA[pair]
        sources, targets = read_text_lines(source_file)[: args.limit], read_text_lines(target_file)[: args.limit]
        for runs in (int(k) for k in args.runs.split(",")):
            started = time.perf_counter()
            first = oracles(align_with_eflomal(sources, targets, runs=runs, **seeded), sources)
            second = oracles(align_with_eflomal(sources, targets, runs=runs, **seeded), sources)
            seconds = (time.perf_counter() - started) / 2
            tau, identical = agreement(first, second)
            print(
                f"| {pair} | {len(sources)} | {runs} | {tau:.3f} | {100 * identical:.1f}% | {seconds:.1f} |", flush=True
            )
        forward, reverse = eflomal_directional(sources, targets)
        new = symmetrize(forward, reverse, "grow-diag-final-and")
        old = [[x for p in sorted(previous_grow_diag_final_and(f, r)) for x in p] for f, r in zip(forward, reverse)]
        links_differ = sum(a != b for a, b in zip(new, old)) / len(new)
        oracle_new, oracle_old = oracles(new, sources), oracles(old, sources)
        oracle_differ = sum(a != b for a, b in zip(oracle_new, oracle_old)) / len(new)
        symmetrisation_rows.append(
            f"| {pair} | {len(sources)} | {100 * links_differ:.1f}% | {100 * oracle_differ:.1f}% |"
        )
        print(
            f"(symmetrisation, {pair}: links differ {100 * links_differ:.1f}%, "
            f"oracle differs {100 * oracle_differ:.1f}%)",
            flush=True,
        )
    print("\n| pair | pairs | links differ (reference vs previous grow-diag-final-and) | oracle differs |")
    print("|---|---|---|---|")
    print("\n".join(symmetrisation_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
