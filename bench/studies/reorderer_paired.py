"""Two trained reorderers on the same test split, sentence by sentence: paired bootstrap of the differences in
mean Kendall tau, FRS and exact match against the oracle BTG order (issue 17: is a training objective better,
or within noise?).

    python bench/studies/reorderer_paired.py --prepared runs/enja_cache/prepared/xlpe-prepare-<id>/data \\
        --baseline runs/reorderer-pairwise --system runs/reorderer-crf [--samples 10000] [--order_prior B]

The test split is read as `bench/studies/reorderer.py` reads it; both reorderers use their own saved tokenizer. For each
metric: the two means, their difference, a 95% bootstrap interval of the difference, and p = the share of
resamples in which the system does not beat the baseline (Koehn 2004's paired bootstrap, one-sided).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/studies: the sibling studies

from reorderer import oracle_word_positions  # noqa: E402  (bench/studies/reorderer.py)

from xlpe.evaluation.alignment_quality import reordering_quality  # noqa: E402
from xlpe.features.predicted_reordering import predict_word_positions  # noqa: E402

METRICS = ("kendall_tau", "fuzzy_reordering_score", "exact_match")


def per_sentence_scores(model_dir: str, sources: list[str], oracle: list[list[int]], order_prior: float | None) -> dict:
    from transformers import AutoTokenizer

    from xlpe.models.modeling_reorderer import XLPEReordererModel

    model = XLPEReordererModel.from_pretrained(model_dir).eval()
    if order_prior is not None:
        model.config.order_prior = order_prior
    predicted, _ = predict_word_positions(
        model, AutoTokenizer.from_pretrained(model_dir), sources, long_lines="monotone"
    )
    return reordering_quality(predicted, oracle, min_items=2, per_sentence=True)["per_sentence"]


def paired_bootstrap(system: np.ndarray, baseline: np.ndarray, samples: int, seed: int = 1) -> dict:
    """Mean difference, its 95% interval and the one-sided p over `samples` resamples of the sentences."""
    rng = np.random.default_rng(seed)
    diff = system - baseline
    means = diff[rng.integers(0, len(diff), size=(samples, len(diff)))].mean(axis=1)
    return {
        "system": float(system.mean()),
        "baseline": float(baseline.mean()),
        "difference": float(diff.mean()),
        "interval_95": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
        "p": float((means <= 0).mean()),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--prepared", required=True, help="prepared DatasetDict with a test split (source_text, word_alignment)"
    )
    parser.add_argument(
        "--baseline", required=True, help="reorderer directory (xlpe-reorder train / bench/studies/reorderer.py)"
    )
    parser.add_argument("--system", required=True, help="the reorderer compared with it")
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--order_prior", type=float, default=None, help="decode both with this order prior")
    args = parser.parse_args(argv)

    import datasets

    sources, oracle = oracle_word_positions(datasets.load_from_disk(args.prepared)["test"])
    base = per_sentence_scores(args.baseline, sources, oracle, args.order_prior)
    system = per_sentence_scores(args.system, sources, oracle, args.order_prior)
    result = {
        name: paired_bootstrap(np.asarray(system[name], float), np.asarray(base[name], float), args.samples)
        for name in METRICS
    }
    print("| metric | baseline | system | difference | 95% interval | p |\n|---|---|---|---|---|---|")
    for name, r in result.items():
        low, high = r["interval_95"]
        print(
            f"| {name} | {r['baseline']:.3f} | {r['system']:.3f} | {r['difference']:+.3f} | "
            f"[{low:+.3f}, {high:+.3f}] | {r['p']:.4f} |"
        )
    print(json.dumps({"baseline": args.baseline, "system": args.system, "sentences": len(base["kendall_tau"])}))
    return result


if __name__ == "__main__":
    main()
