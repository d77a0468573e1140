"""Do the standard MT recipe switches change what the built-in demo learns? (issue 20)

Trains the built-in demo (`xlpe-train`, XL PE Combination, SVO -> SOV corpus) as is, with `--label_smoothing_factor 0.1
--train_sampling_strategy group_by_length`, and with each switch alone, for several seeds, and reports test BLEU with
predicted and oracle positions (mean ± std), the last logged reorder loss, and a paired bootstrap of the switched run
against the plain one per seed (sacrebleu).

    python bench/studies/recipe_switches.py --seeds 1,2,3 --work_dir runs/switches > switches.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: benchlib
from benchlib.tables import mean_std  # noqa: E402

SWITCHES = {  # name -> (output directory prefix, flags)
    "demo": ("plain", []),
    "demo + label smoothing 0.1 + group_by_length": (
        "switched",
        ["--label_smoothing_factor", "0.1", "--train_sampling_strategy", "group_by_length"],
    ),
    "demo + label smoothing 0.1": ("smoothed", ["--label_smoothing_factor", "0.1"]),
    "demo + group_by_length": ("grouped", ["--train_sampling_strategy", "group_by_length"]),
}


def run_one(work: Path, name: str, prefix: str, flags: list[str], seed: int) -> dict:
    from xlpe.training.run import main as xlpe_train

    out = work / f"{prefix}-seed{seed}"
    if not (out / "test_scores.json").is_file():
        xlpe_train(
            [
                "--output_dir",
                str(out),
                "--overwrite_output_dir",
                "--seed",
                str(seed),
                "--report_to",
                "none",
                "--disable_tqdm",
                "true",
                "--num_translation_examples",
                "0",
                *flags,
            ]
        )
    scores = json.loads((out / "test_scores.json").read_text())
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    reorder = [entry["reorder_loss"] for entry in history if "reorder_loss" in entry and "loss" in entry]
    return {
        "name": name,
        "seed": seed,
        "bleu": scores["bleu"]["score"],
        "signature": scores["bleu"]["signature"],
        "oracle_bleu": scores["oracle_positions"]["bleu"]["score"],
        "reorder_losses_logged": len(reorder),
        "last_reorder_loss": reorder[-1] if reorder else None,
        "hypotheses": (out / "generated_predictions.txt").read_text(encoding="utf-8").splitlines(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--work_dir", default="runs/recipe-switches")
    parser.add_argument(
        "--variants",
        default="all",
        choices=["all", "both"],
        help="all: each switch alone too; both: only the plain and the switched demo",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    work = Path(args.work_dir)
    chosen = [name for name in SWITCHES if args.variants == "all" or name in ("demo", list(SWITCHES)[1])]
    rows = {name: [run_one(work, name, *SWITCHES[name], seed) for seed in seeds] for name in chosen}

    from xlpe.evaluation import paired_significance
    from xlpe.training.data import load_raw_splits
    from xlpe.training.run import parse_arguments

    model_args, data_args, _ = parse_arguments(["--output_dir", str(work / "_args")])
    references = load_raw_splits(data_args, model_args)["test"].targets
    plain, pvalues = rows["demo"], {}
    for name, records in rows.items():
        if name == "demo":
            continue
        cells = []
        for a, b in zip(plain, records):
            sig = paired_significance(b["hypotheses"], a["hypotheses"], references[: len(a["hypotheses"])])["metrics"][
                "BLEU"
            ]
            cells.append(f"{sig['delta']:+.2f} (p {sig['p_value']:.3f})")
        pvalues[name] = ", ".join(cells)
    print("| run | seeds | test BLEU, predicted positions | test BLEU, oracle positions | reorder loss (last log) |")
    print("|---|---|---|---|---|")
    for name, records in rows.items():
        losses = [r["last_reorder_loss"] for r in records]
        print(
            f"| {name} | {len(records)} | {mean_std([r['bleu'] for r in records])} | "
            f"{mean_std([r['oracle_bleu'] for r in records])} | "
            f"{mean_std(losses) if None not in losses else 'not logged'} |"
        )
    print("\nAgainst the plain demo, per seed (ΔBLEU, paired bootstrap p):")
    for name, cells in pvalues.items():
        print(f"* {name}: {cells}")
    print(f"Signature: `{plain[0]['signature']}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
