"""Tables of one GPU session from the files the device call brought back (docs/benchmarks/gpu.md).

    python bench/gpu_report.py docs/benchmarks/results/gpu-2026-11-28    # -> results/gpu.json, then the page

The folder holds what `bench/gpu_session.sh session` wrote under $OUT (`session/`: env.txt, setup.jsonl, tests.jsonl,
bench.jsonl, train.jsonl, quality.jsonl, session.log) and, when a second call timed rows on their own, that call's
`bench/speed.py --json` files (`speed/*.json`). Every table states what did not run as plainly as what did: a stage cut
by its limit is a row with its limit, not an absence.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.tables import RESULTS_DIR, write_results  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "benchmarks" / RESULTS_DIR / "gpu.json"


def table(title: str, header: list[str], rows: list[list[str]]) -> dict:
    return {"title": title, "header": header, "align": ["---"] * len(header), "rows": rows}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []


def environment_rows(folder: Path) -> list[list[str]]:
    text = (folder / "session" / "env.txt").read_text(encoding="utf-8")
    gpu = re.search(r"^(NVIDIA [^,]+), (\d+) MiB, ([\d.]+)", text, re.M)
    versions = re.search(r"python ([\d.]+) \| torch (\S+) \| cuda (\S+) \| device (.+)", text)
    transformers = re.search(r"^transformers (\S+)", text, re.M)
    return [
        ["device (torch)", versions.group(4)],
        ["GPU memory, driver", f"{int(gpu.group(2)):,} MiB, driver {gpu.group(3)}"],
        ["python / torch / CUDA", f"{versions.group(1)} / {versions.group(2)} / {versions.group(3)}"],
        ["transformers", f"{transformers.group(1)} (carried wheel; the image has 5.17)"],
    ]


def stage_rows(folder: Path) -> list[list[str]]:
    """One row per stage of session.log: its hard limit, seconds, and what it left behind."""
    log = (folder / "session" / "session.log").read_text(encoding="utf-8")
    rows = []
    for match in re.finditer(r"^== (\S+)\n(.*?)^== \1 done in (\d+) s", log, re.M | re.S):
        stage, body, seconds = match.groups()
        limits = re.findall(r"^\$ timeout (\d+)", body, re.M)
        cut = "time limit" if "# exit status 124" in body else ("failed" if "# FAILED" in body else "finished")
        rows.append([f"`{stage}`", ", ".join(sorted(set(limits))) or "—", seconds, cut])
    return rows


def correctness_rows(folder: Path, collected: int | None) -> list[list[str]]:
    """Per test function: families passed / failed (tests.jsonl has one line per finished test)."""
    by_test: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for record in jsonl(folder / "session" / "tests.jsonl"):
        name, _, family = record["test"].partition("::")[2].partition("[")
        by_test[name][record["outcome"]].append(family.rstrip("]"))
    rows = [
        [f"`{name}`", str(len(outcomes["passed"])), ", ".join(outcomes.get("failed", [])) or "—"]
        for name, outcomes in by_test.items()
    ]
    finished = sum(len(o["passed"]) + len(o.get("failed", [])) for o in by_test.values())
    if collected:
        rows.append(["not reached (stage limit)", str(collected - finished), "—"])
    return rows


def speed_rows(folder: Path) -> list[list[str]]:
    rows = []
    for path in sorted((folder / "speed").glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        by_name = {model["name"]: model for model in result["models"]}
        for model in result["models"]:
            if not model.get("baseline"):
                continue
            base = by_name[model["baseline"]]
            train, gen = model["train_ratio"], model["gen_ratio"]
            flagged = [flag for flag in result["flags"] if flag.startswith(model["name"] + ":")]
            rows.append(
                [
                    model["name"],
                    model["baseline"],
                    f"**{train['median']:.3f}** ({train['min']:.3f}–{train['max']:.3f})",
                    f"{gen['median']:.3f} ({gen['min']:.3f}–{gen['max']:.3f})" + (" ⚠ flagged" if flagged else ""),
                    f"{base['train_tokens_per_s'] / 1e3:.0f}k / {model['train_tokens_per_s'] / 1e3:.0f}k",
                    f"{base['train_mfu']:.1%} / {model['train_mfu']:.1%}",
                    f"{result['switches']}; {result['repeats']} repeats × {result['train_steps']} steps",
                ]
            )
    return rows


def quality_rows(folder: Path) -> list[list[str]]:
    rows = []
    for record in jsonl(folder / "session" / "quality.jsonl"):
        oracle = f"{record['oracle_bleu']:.2f}" if "oracle_bleu" in record else "—"
        rows.append(
            [
                record["name"],
                str(record["seed"]),
                f"{record['bleu']:.2f}",
                f"{record['chrf']:.2f}",
                oracle,
                f"{record['seconds']:.0f}",
            ]
        )  # one signature for every row: stated under the table
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the session's files (session/, speed/)")
    parser.add_argument("--collected", type=int, default=None, help="how many `gpu` tests pytest collects")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file to write the tables into")
    args = parser.parse_args(argv)
    folder = args.folder
    tables = {
        "gpu/environment": table("Machine", ["what", "value"], environment_rows(folder)),
        "gpu/stages": table(
            "Stages of the one-call session", ["stage", "limit (s)", "took (s)", "end"], stage_rows(folder)
        ),
        "gpu/correctness": table(
            "`gpu` tests on CUDA", ["test", "families passed", "failed"], correctness_rows(folder, args.collected)
        ),
        "gpu/speed": table(
            "Transformer-base step ratios",
            [
                "model",
                "vs",
                "train step ratio, median (min–max)",
                "beam-5 generation ratio",
                "train target tokens/s (stock / ours)",
                "train MFU (stock / ours)",
                "switches",
            ],
            speed_rows(folder),
        ),
        "gpu/quality": table(
            "Base-size de→en on Multi30k, first signal",
            ["run", "seed", "BLEU", "chrF", "BLEU, oracle positions", "seconds"],
            quality_rows(folder),
        ),
    }
    write_results(args.results, tables, drop=set(tables))
    print(f"wrote {len(tables)} tables into {args.results}; render them: python bench/render_tables.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
