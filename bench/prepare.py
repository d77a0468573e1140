"""Throughput of feature preparation on Multi30k train (29k en-de pairs), stage by stage and end to end.

    python bench/prepare.py                      # tok/ (Moses-tokenised, lowercased) text, 2 worker processes
    python bench/prepare.py --variant raw --num-proc 1 --pairs 5000 --json /tmp/bench.json

Stages (each timed on its own, single process unless noted):
  align      eflomal forward + reverse (eflomal's own threads), then grow-diag-final-and
  reorder    the BTG oracle from in-memory links (`oracle_xl_positions_flat`, as in the pipeline) and from
             per-sentence link lists (`oracle_xl_positions_batch`, the public batch API); 5 runs
  tag        NLTK averaged-perceptron tagging of the English side
  tokenize   fast tokenizer, source and target, with word ids
  total      `prepare_dataset` end to end (align + reorder + DPE targets + tag + tokenize), --num-proc workers
Needs ../shared/data (Multi30k, nltk_data) beside the repository. The machine load average is printed,
because on a shared machine it moves the figures a lot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]  # checkout; benchlib

from benchlib.data import DATA  # noqa: E402

from xlpe.features.alignment import eflomal_directional, read_text_lines, symmetrize  # noqa: E402
from xlpe.features.prepare import prepare_dataset, tokenize_with_word_ids  # noqa: E402
from xlpe.features.reordering import oracle_xl_positions_batch, oracle_xl_positions_flat  # noqa: E402
from xlpe.features.tagging import get_tagger  # noqa: E402
from xlpe.features.tokenization import train_joint_tokenizer  # noqa: E402


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (eflomal, map workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(function, *args, repeat=1, **kwargs):
    """(best wall seconds, mean CPU seconds incl. children, result) over `repeat` runs."""
    best_wall, result = float("inf"), None
    cpu = cpu_seconds()
    for _ in range(repeat):
        wall = time.perf_counter()
        result = function(*args, **kwargs)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_wall, (cpu_seconds() - cpu) / repeat, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("tok", "raw"), default="tok")
    parser.add_argument("--pairs", type=int, default=29000)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    folder = DATA / "multi30k" / args.variant
    stem = "train.lc.norm.tok" if args.variant == "tok" else "train"
    source_file, target_file = folder / f"{stem}.en.gz", folder / f"{stem}.de.gz"
    english, german = read_text_lines(source_file)[: args.pairs], read_text_lines(target_file)[: args.pairs]
    n = len(english)
    tokenizer = train_joint_tokenizer(english + german, vocab_size=8000)  # an input of the pipeline: untimed
    load_before = os.getloadavg()
    rows = []

    wall, cpu, (forward, reverse) = timed(eflomal_directional, english, german)
    rows.append(("align: eflomal forward + reverse", wall, cpu))
    wall, cpu, links = timed(symmetrize, forward, reverse, "grow-diag-final-and")
    rows.append(("align: grow-diag-final-and", wall, cpu))

    lengths = np.array([len(s.split()) for s in english])
    counts = np.fromiter(map(len, links), dtype=np.int64) // 2
    flat = np.fromiter(itertools.chain.from_iterable(links), dtype=np.int64)
    sentence = np.repeat(np.arange(n), counts)
    wall, cpu, oracle = timed(oracle_xl_positions_flat, sentence, flat[0::2], flat[1::2], lengths, repeat=5)
    rows.append(("reorder: BTG oracle, flat links (pipeline path)", wall, cpu))
    wall, cpu, _ = timed(oracle_xl_positions_batch, links, lengths, repeat=5)
    rows.append(("reorder: BTG oracle, per-sentence lists (batch API)", wall, cpu))

    tagger = get_tagger("nltk-en", nltk_data=DATA / "nltk_data")
    wall, cpu, _ = timed(tagger.tag, [s.split() for s in english])
    rows.append(("tag: NLTK perceptron, English side", wall, cpu))
    wall, cpu, _ = timed(
        lambda: (tokenize_with_word_ids(tokenizer, english), tokenize_with_word_ids(tokenizer, german, target=True))
    )
    rows.append(("tokenize: source + target with word ids", wall, cpu))

    wall, cpu, (data, report) = timed(
        prepare_dataset,
        source_file if n == 29000 else english,
        target_file if n == 29000 else german,
        tokenizer,
        source_tagger="nltk-en",
        nltk_data=DATA / "nltk_data",
        num_proc=args.num_proc,
    )
    rows.append((f"total: prepare_dataset, num_proc={args.num_proc}", wall, cpu))

    print(
        f"Multi30k train {args.variant}/ en-de, {n} pairs; {os.cpu_count()} CPUs ({platform.processor() or '?'}), "
        f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}"
    )
    print("| stage | wall s | pairs/s (wall) | CPU s (all processes) | pairs/s per CPU-second |")
    print("|---|---:|---:|---:|---:|")
    for name, wall, cpu in rows:
        per_cpu = f"{n / cpu:,.0f}" if cpu >= 0.05 else "(too short to time)"  # os.times() ticks: 10 ms
        print(f"| {name} | {wall:.2f} | {n / wall:,.0f} | {cpu:.2f} | {per_cpu} |")
    print(
        f"report: kept {report['pairs_kept']}, BTG repairs {report['btg_repairs']} "
        f"({report['btg_repair_ratio']:.2%}), unaligned ratio {report['unaligned_ratio']:.3f}, "
        f"mean Kendall tau {report['mean_kendall_tau']:.3f}; oracle repairs in the stage run "
        f"{int(oracle.repaired.sum())}; pipeline timings {report['timings_s']}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"pairs": n, "load_before": load_before, "rows": rows, "report": report}, indent=2, default=str)
        )


if __name__ == "__main__":
    main()
