"""The XL PE Combination train-step ratio against stock MarianMT, measured with the package as it was at other
commits: is a slower ratio a regression of the code, or of the machine?

    python bench/studies/step_ratio_across_commits.py ed5bd75 HEAD                 # 10 processes each, alternating
    python bench/studies/step_ratio_across_commits.py ed5bd75 HEAD --processes 4 --pairs 20
    python bench/studies/step_ratio_across_commits.py --trees /path/to/old/checkout .   # checkouts instead of commits
    python bench/studies/step_ratio_across_commits.py HEAD --processes 20 --pairs 40 --control  # one commit, A/A
    control

Each commit is checked out once (`git worktree add --detach`, removed afterwards) and timed in fresh processes
(PYTHONPATH = that checkout) that alternate between the commits: commit A, commit B, commit A, ... so drift of the
machine falls on every commit alike. A process builds stock MarianMT and XL PE Combination (tau = H/4, default
config, oracle positions given with the labels: the predictor and its loss run) from the same seed, warms both
up, then times `--pairs` interleaved train steps of each (forward + backward + fused AdamW, eager, fp32) and
reports median(XL PE) / median(stock): bench/studies/xlpe_step_ratio.py's measurement (dims, batch, steps), written
against the public API only (`xlpe.XLPEMarianConfig`, `xlpe.XLPEMarianMTModel`) so that it runs with the package
of any commit since that API existed. The batch is made here once (`xlpe_step_ratio.make_batch`) and read by
every process.

The host allocator is set through glibc's environment variables (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_,
the values of xlpe/training/host_memory.py), so commits from before that module get the same condition.

Why processes and not runs in one process: on the 2-core CI-class VM two instances of the *same* model built in one
process differ by up to 3 % in median step time (docs/benchmarks/speed.md, "Is it the code?"), and so do two
processes; only the distribution over many processes says whether two commits differ. The summary gives each commit's
median and mean over processes, a bootstrap 95 % interval of that mean, and how many processes read at or below
`--target`: the interval, not one process, says where a commit's ratio lies. `--control` adds a second stock model
(built after XL PE from the same seed) to each process's interleave: the ratio of two identical models is the
measurement's own noise (its spread per process, and whether its mean is 1), and XL PE's ratio to the geometric
mean of both stock copies, which spreads less than the ratio to one copy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

STUDIES = Path(__file__).resolve().parent
BENCH = STUDIES.parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(STUDIES)]  # benchlib; the sibling studies

from benchlib.speed_models import SIZES, marian_kwargs  # noqa: E402
from benchlib.timing import add_host_allocator_argument  # noqa: E402
from xlpe_step_ratio import make_batch  # noqa: E402

from xlpe.training.host_memory import MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES  # noqa: E402

# One process's measurement: only torch, transformers and xlpe's public classes (any commit's package).
MEASURE = r"""
import json, statistics, sys, time
import torch
import xlpe
from transformers import MarianConfig, MarianMTModel
kwargs, batch_file, pairs, warmup, threads, control = json.loads(sys.argv[1])
torch.set_num_threads(threads)
batch = torch.load(batch_file)
torch.manual_seed(0)
stock = MarianMTModel(MarianConfig(**kwargs))
torch.manual_seed(0)
heads = kwargs["encoder_attention_heads"]
xl = xlpe.XLPEMarianMTModel(xlpe.XLPEMarianConfig(**kwargs, xl_strategy="combination", xl_heads=max(1, heads // 4)))
torch.manual_seed(0)
twin = MarianMTModel(MarianConfig(**kwargs)) if control else None  # A/A control: stock again, same weights

def step_fn(model, extra):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    model.train()
    def step():
        inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        model(**inputs, **extra).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step

steps = {"stock": step_fn(stock, {}), "xlpe": step_fn(xl, {"reorder_positions": batch["reorder_positions"]})}
if control:
    steps["twin"] = step_fn(twin, {})
for _ in range(warmup):
    for step in steps.values():
        step()
times = {name: [] for name in steps}
for pair in range(pairs):
    for name in (list(steps) if pair % 2 == 0 else list(steps)[::-1]):
        start = time.perf_counter()
        steps[name]()
        times[name].append(time.perf_counter() - start)
medians = {name: statistics.median(values) for name, values in times.items()}
result = {"stock_ms": 1e3 * medians["stock"], "ratio": medians["xlpe"] / medians["stock"]}
if control:
    result["control_ratio"] = medians["twin"] / medians["stock"]
print("RESULT " + json.dumps(result))
"""


def allocator_env(choice: str) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    if choice == "steady":
        env.update(MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD_BYTES), MALLOC_TRIM_THRESHOLD_=str(TRIM_THRESHOLD_BYTES))
    return env


def measure_once(tree: Path, payload: list, env: dict) -> dict:
    """One fresh process with the package of `tree`."""
    env = {**env, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(payload)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the repository: `import xlpe` must find the tree's package
        env=env,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"the measurement with {tree} failed:\n{result.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def checkouts(commits: list[str], folder: Path) -> list[Path]:
    trees = []
    for index, commit in enumerate(commits):
        tree = folder / f"tree{index}"
        added = subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), commit],
            capture_output=True,
            text=True,
            check=False,
        )
        if added.returncode != 0:
            remove(trees)
            last = (added.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            print(f"step_ratio_across_commits.py: cannot check out {commit!r}: {last}", file=sys.stderr)
            raise SystemExit(2)
        trees.append(tree)
    return trees


def remove(trees: list[Path]) -> None:
    for tree in trees:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def run(trees: list[Path], labels: list[str], args) -> dict:
    dims = dict(SIZES[args.size])
    with tempfile.TemporaryDirectory() as scratch:
        batch = make_batch(args.batch_size, args.length, dims["vocab_size"], seed=0)
        batch_file = Path(scratch) / "batch.pt"
        fields = ("input_ids", "attention_mask", "labels", "reorder_positions")
        torch.save({name: getattr(batch, name) for name in fields}, batch_file)
        payload = [marian_kwargs(dims), str(batch_file), args.pairs, args.warmup, args.threads, args.control]
        env = allocator_env(args.host_allocator)
        results = {label: [] for label in labels}
        for repeat in range(args.processes):
            for tree, label in zip(trees, labels):
                value = measure_once(tree, payload, env)
                results[label].append(value)
                line = f"process {repeat + 1} {label}: stock {value['stock_ms']:.1f} ms, ratio {value['ratio']:.4f}"
                print(line + (f", control {value['control_ratio']:.4f}" if args.control else ""), flush=True)
    summary = {}
    for label, values in results.items():
        ratios = sorted(value["ratio"] for value in values)
        low, high = mean_interval(ratios)
        summary[label] = {
            "median": statistics.median(ratios),
            "mean": statistics.fmean(ratios),
            "mean_95": [low, high],
            "range": [ratios[0], ratios[-1]],
            "processes": len(ratios),
            "processes_at_or_below_target": sum(ratio <= args.target for ratio in ratios),
        }
        print(
            f"{label}: ratio median {statistics.median(ratios):.4f}, mean {statistics.fmean(ratios):.4f} "
            f"(95 % interval of the mean {low:.4f}-{high:.4f}; range {ratios[0]:.4f}-{ratios[-1]:.4f}, "
            f"{len(ratios)} processes, {summary[label]['processes_at_or_below_target']} at or below {args.target})"
        )
        if args.control:
            controls = [value["control_ratio"] for value in values]
            # XL PE against both stock copies (geometric mean): a process whose one stock copy is fast or slow by its
            # placement moves both ratios, so this estimator spreads less than the ratio to one copy
            against_both = [value["ratio"] / value["control_ratio"] ** 0.5 for value in values]
            for name, series, what in (
                ("control", controls, "control (second stock / stock)"),
                ("against_both_stock", against_both, "XL PE / both stock copies"),
            ):
                low, high = mean_interval(series)
                sd = statistics.stdev(series) if len(series) > 1 else 0.0
                summary[label][name] = {"mean": statistics.fmean(series), "mean_95": [low, high], "sd": sd}
                print(
                    f"{label}: {what} mean {statistics.fmean(series):.4f} (95 % interval {low:.4f}-{high:.4f}, "
                    f"sd {sd:.4f} per process)"
                )
    if args.json:
        args.json.write_text(json.dumps({"processes": results, "summary": summary, "argv": vars(args)}, default=str))
    return results


def mean_interval(values: list[float], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple:
    """Percentile-bootstrap interval of the mean of `values` (processes are independent draws of the machine's
    placement and state; `resamples` resamples with replacement, seeded, so a rerun prints the same interval)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    draw = random.Random(seed)
    means = sorted(statistics.fmean(draw.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return means[int(tail * resamples)], means[min(resamples - 1, int((1 - tail) * resamples))]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="*", help="git revisions to compare (checked out as worktrees)")
    parser.add_argument("--trees", nargs="+", type=Path, default=[], help="checkouts to compare instead of commits")
    parser.add_argument("--processes", type=int, default=10, help="fresh processes per commit, alternating")
    parser.add_argument("--pairs", type=int, default=30, help="interleaved steps of each model per process")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each model first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", default="small", choices=sorted(SIZES), help="model dims (bench/speed.py's sizes)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=24, help="longest source/target sentence (tokens)")
    parser.add_argument("--target", type=float, default=1.03, help="ratio to count processes against (issue 38)")
    parser.add_argument(
        "--control",
        action="store_true",
        help="also time a second stock model in each process (A/A): the ratio identical models read, the noise floor",
    )
    parser.add_argument("--json", type=Path, help="write every process's result and the summary here")
    add_host_allocator_argument(parser)  # here set through glibc's environment variables (allocator_env)
    args = parser.parse_args(argv)
    if bool(args.commits) == bool(args.trees):
        parser.error("give commits or --trees, not both and not neither")
    for name in ("processes", "pairs", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.trees:
        return run([tree.resolve() for tree in args.trees], [str(tree) for tree in args.trees], args)
    with tempfile.TemporaryDirectory() as folder:
        trees = checkouts(args.commits, Path(folder))
        try:
            return run(trees, args.commits, args)
        finally:
            remove(trees)


if __name__ == "__main__":
    main()
