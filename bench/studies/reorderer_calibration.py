"""The order prior of a pair's standalone reorderer, chosen on held-out pairs, and what it does to BLEU (issue 17).

    python bench/studies/reorderer_calibration.py --work_dir /tmp/repro/ende --pair en-de [--mode cpu] [--prior 0.25]

Reads a `bench/reproduce.py` work dir that has the pair's reorderer and its `combination+reorderer` and `vanilla`
runs. 1. Calibrates the reorderer on the validation split (`calibrate_order_prior`, one-SE rule; every prior's
tau). 2. Word-level Kendall tau on the test split for prior 0, the chosen prior and the monotone order. 3. Decodes
the test split again with each seed's `combination+reorderer` model at the prior the run used (checked line by
line against the run's own hypotheses: the same model, the same decoding), at prior 0 and at the chosen prior (or
`--prior`); compares the chosen prior with prior 0 (paired bootstrap per seed) and both with vanilla of the same
seed. The reorderer in the work dir is not changed (copies are decoded). Writes
<work_dir>/reorderer_calibration_<pair>.json and prints the tables (markdown).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import reproduction  # noqa: E402
from benchlib.tables import mean_std  # noqa: E402


def reorderer_copy(work: Path, pair: str, mode: dict, prior: float) -> Path:
    """The pair's reorderer saved again with `order_prior` = prior (what --reorderer reads)."""
    from transformers import AutoTokenizer

    from xlpe.models.modeling_reorderer import XLPEReordererModel

    source = reproduction.reorderer_dir(work, pair, mode)
    path = work / "calibration" / pair / f"reorderer-prior{prior}"
    if not (path / "model.safetensors").is_file():
        model = XLPEReordererModel.from_pretrained(source)
        model.config.order_prior = prior
        model.save_pretrained(path)
        AutoTokenizer.from_pretrained(source).save_pretrained(path)
    return path


def translate(work: Path, spec: dict, seed: int, mode: dict, reorderer: Path, prior: float) -> list[str]:
    """The test split decoded by the run's saved model (as xlpe-train decoded it) with `reorderer`'s positions."""
    out = work / "calibration" / spec["pair"] / f"seed{seed}-prior{prior}"
    hypotheses = out / "generated_predictions.txt"
    if hypotheses.is_file():
        return hypotheses.read_text(encoding="utf-8").splitlines()
    return reproduction.decode_test_split(work, spec, seed, mode, out, {"reorderer": str(reorderer)})


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", required=True, help="a bench/reproduce.py work dir")
    parser.add_argument("--pair", required=True, choices=reproduction.PAIRS)
    parser.add_argument("--mode", default="cpu", choices=tuple(reproduction.MODES))
    parser.add_argument(
        "--prior", type=float, default=None, help="decode with this prior instead of the calibrated one"
    )
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args(argv)
    import datasets

    from xlpe.evaluation import paired_significance
    from xlpe.models.modeling_reorderer import XLPEReordererModel
    from xlpe.training.reorderer import ORDER_PRIORS, calibrate_order_prior, sentence_taus

    work, mode = Path(args.work_dir), reproduction.MODES[args.mode]
    records = reproduction.read_results(work / "results.jsonl")
    spec = next(
        s
        for s in reproduction.for_pair(reproduction.group_runs("reorderer", mode), args.pair, "reorderer")
        if s["name"] == "combination+reorderer"
    )
    clean = datasets.load_from_disk(str(reproduction.prepared_dir(work, args.pair, "clean", mode)))
    reorderer = XLPEReordererModel.from_pretrained(reproduction.reorderer_dir(work, args.pair, mode))
    as_run = reorderer.config.order_prior  # what the runs decoded with (0 for reorderers trained before calibration)
    calibration = calibrate_order_prior(reorderer, clean["validation"], batch_size=args.batch_size)
    prior = calibration["chosen"] if args.prior is None else args.prior
    test_taus, sentences = sentence_taus(reorderer, clean["test"], tuple(sorted({0.0, prior})), args.batch_size)
    result = {
        "pair": args.pair,
        "calibration": calibration,
        "decoded_prior": prior,
        "test_kendall_tau": {str(k): statistics.mean(v) for k, v in test_taus.items()},
        "test_sentences": sentences,
        "seeds": {},
    }
    print(
        f"## {args.pair}: order prior chosen on {calibration['held_out_pairs']} validation pairs "
        f"(one-SE rule): {calibration['chosen']} (best tau: {calibration['best']})\n"
    )
    print("| prior | tau, validation | SE of the difference to the best | tau, test |\n|---|---|---|---|")
    for p in ORDER_PRIORS:
        row = calibration["by_prior"][str(p)]
        test = result["test_kendall_tau"].get(str(p))
        print(
            f"| {p} | {row['kendall_tau']:.3f} | {row['tau_standard_error_vs_best']:.3f} | "
            f"{'' if test is None else f'{test:.3f}'} |"
        )
    print(
        f"| monotone | {calibration['monotone_kendall_tau']:.3f} | | {result['test_kendall_tau']['monotone']:.3f} |\n"
    )

    references = clean["test"]["target_text"]
    target = args.pair.split("-")[1]
    runs = {(r["name"], r["seed"]): r for r in records if r["pair"] == args.pair and r["mode"] == args.mode}
    seeds = sorted(seed for name, seed in runs if name == "combination+reorderer" and ("vanilla", seed) in runs)
    if not seeds:
        raise SystemExit(f"{work / 'results.jsonl'}: no combination+reorderer run with its vanilla on {args.pair}")
    for seed in seeds:
        recorded = Path(runs["combination+reorderer", seed]["hypotheses"]).read_text(encoding="utf-8").splitlines()
        decoded = {
            p: translate(work, spec, seed, mode, reorderer_copy(work, args.pair, mode, p), p)
            for p in sorted({0.0, as_run, prior})
        }
        same = sum(a == b for a, b in zip(decoded[as_run], recorded))
        if same != len(recorded) or len(decoded[as_run]) != len(recorded):
            raise SystemExit(
                f"seed {seed}: prior {as_run} re-decoded {same} of {len(recorded)} lines as the run did: "
                "not the same decoding"
            )
        at_zero, chosen = decoded[0.0], decoded[prior]
        vanilla = Path(runs["vanilla", seed]["hypotheses"]).read_text(encoding="utf-8").splitlines()
        against_zero = paired_significance(chosen, at_zero, references, target_language=target)["metrics"]["BLEU"]
        against_vanilla = paired_significance(chosen, vanilla, references, target_language=target)["metrics"]["BLEU"]
        zero_vs_vanilla = paired_significance(at_zero, vanilla, references, target_language=target)["metrics"]["BLEU"]
        result["seeds"][seed] = {
            "identical_lines_as_run": same,
            "prior_as_run": as_run,
            "delta_vs_prior_0": against_zero["delta"],
            "p_vs_prior_0": against_zero["p_value"],
            "delta_vs_vanilla": against_vanilla["delta"],
            "p_vs_vanilla": against_vanilla["p_value"],
            "prior_0_delta_vs_vanilla": zero_vs_vanilla["delta"],
            "prior_0_p_vs_vanilla": zero_vs_vanilla["p_value"],
        }
    rows = result["seeds"].values()
    print(
        f"| combination+reorderer, {len(seeds)} seeds | ΔBLEU, prior {prior} vs 0 (p per seed) | "
        f"vs vanilla, prior 0 | vs vanilla, prior {prior} |"
    )
    print("|---|---|---|---|")
    p_zero = ", ".join(f"{r['p_vs_prior_0']:.3f}" for r in rows)
    p_vanilla = ", ".join(f"{r['p_vs_vanilla']:.3f}" for r in rows)
    print(
        f"| {args.pair} | {mean_std([r['delta_vs_prior_0'] for r in rows])} ({p_zero}) | "
        f"{mean_std([r['prior_0_delta_vs_vanilla'] for r in rows])} | "
        f"{mean_std([r['delta_vs_vanilla'] for r in rows])} ({p_vanilla}) |"
    )
    print(
        f"\nthe runs' own prior ({as_run}) re-decoded identically: "
        f"{', '.join(str(r['identical_lines_as_run']) for r in rows)} lines of {len(references)}"
    )
    (work / f"reorderer_calibration_{args.pair}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
