"""The XL PE Combination train step against stock MarianMT of the same dims, as one quick number (issue 38 item 6).

    python bench/studies/xlpe_step_ratio.py                      # 2 threads, 40 interleaved pairs, wall clock
    python bench/studies/xlpe_step_ratio.py --threads 1  # + process CPU time, robust to other load on the machine
    python bench/studies/xlpe_step_ratio.py --runs 3             # three independent measurements (spread)
    python bench/studies/xlpe_step_ratio.py --host-allocator default   # glibc as the process starts (see below)
    python bench/studies/xlpe_step_ratio.py --instances 6 --pairs 12    # six copies of each model pooled (see below)

Setup: d_model 256, 3+3 layers, 4 heads, FFN 1024, vocabulary 8000 (bench/speed.py's `small` dims); one
sentence batch of 32 x 24 tokens (source and target lengths uniform in [12, 24], the longest 24, EOS
included; `batch_from_lengths`, seed 0); XL PE Combination with
tau = H/4 as bench/speed.py's "XL PE combination" row, trained on oracle positions, so the reorder predictor and
its loss run. A train step is forward + backward + AdamW, eager, fp32; AdamW is the fused implementation
(`--optimizer fused`, the default), which is what `xlpe-train` and any Trainer run on CPU as on CUDA
(transformers' default `optim` is `adamw_torch_fused` with torch >= 2.8); `--optimizer default` times torch's
per-parameter loop instead, whose cost grows with the number of parameter tensors (XL PE has 21 more than stock). After
a warm-up, `--pairs` steps of each model are interleaved (XL PE then stock, then stock then XL PE, ...); the ratio is
median(XL PE step) / median(stock step), on the wall clock (`time.perf_counter`) and on process CPU time
(`time.process_time`; with one thread it is what the step cost whatever else runs on the machine). The XL PE model runs
twice in the same interleave: with `config.check_inputs=True` (the default; its input checks sync once per call) and
with the checks off (stock models have none), same weights.

Copies of one model with the same weights differ by several percent a step, by where their memory lies (two XL PE
copies in one run: 1.047 and 1.007 of the stock step; in a six-copy run each copy's median was 0.95-1.09 of its
model's), so one copy of each gives a ratio that moves by that much between processes. `--instances N` builds N
copies of each model (their own parameters, gradients and optimizer state), interleaves all their steps and compares
medians over all copies' steps, which averages the placement over N copies; two six-copy runs still differed by up
to 3 % on this VM (2026-11-28), so for a component's cost `bench/studies/xl_step_parts.py` is the precise measurement.

The host allocator is tuned first, as `xlpe-train` does on CPU (`--host-allocator steady`,
xlpe/training/host_memory.py): with glibc's defaults, whether a step's 25 MB logits and gradients land in memory the
kernel must fault in again depends on the order of the step's allocations, which moves either model's median by
5-10 % for no reason of its own (docs/benchmarks/speed.md, "The host allocator").

This is bench/speed.py's train measurement cut down to one row and one batch shape, for bisecting a regression;
bench/speed.py's rows remain the reported numbers.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib.speed_models import SIZES, batch_from_lengths, marian_kwargs, xl_spec  # noqa: E402
from benchlib.timing import add_host_allocator_argument, set_host_allocator  # noqa: E402
from transformers import MarianConfig, MarianMTModel  # noqa: E402

from xlpe.training.model_setup import parse_config_overrides  # noqa: E402


def make_batch(sentences: int, length: int, vocab_size: int, seed: int):
    """`sentences` x `length` source and target: lengths uniform in [length/2, length], the first row full."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (2, sentences), generator=gen)
    lengths[:, 0] = length
    return batch_from_lengths(lengths[0], lengths[1], vocab_size, gen)


def build_models(dims: dict, seed: int, xl_config: dict | None = None) -> dict:
    torch.manual_seed(seed)
    stock = MarianMTModel(MarianConfig(**marian_kwargs(dims)))
    torch.manual_seed(seed)
    checked = xl_spec("combination", **(xl_config or {})).build(dims)
    unchecked = copy.deepcopy(checked)
    unchecked.config.check_inputs = False
    return {"stock": stock, "xlpe": checked, "xlpe_unchecked": unchecked}


OPTIMIZERS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "default": {}}


def step_fn(name: str, model, batch, optimizer_name: str = "fused"):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **OPTIMIZERS[optimizer_name])
    extra = {} if name == "stock" else {"reorder_positions": batch.reorder_positions}
    model.train()

    def step() -> None:
        loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels, **extra).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step.optimizer = optimizer
    return step


def measure(args) -> dict:
    """One measurement: `args.instances` copies of each model (same weights, their own memory), all interleaved;
    per model, the median over every step of every copy."""
    dims = dict(SIZES[args.size])
    batch = make_batch(args.batch_size, args.length, dims["vocab_size"], args.seed)
    steps = {}  # (instance, name) -> step
    for instance in range(args.instances):
        for name, model in build_models(dims, args.seed, args.xl_config).items():
            steps[instance, name] = step_fn(name, model, batch, args.optimizer)
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    wall = {key: [] for key in steps}
    cpu = {key: [] for key in steps}
    keys = list(steps)
    for pair in range(args.pairs):
        for key in keys if pair % 2 == 0 else keys[::-1]:
            w0, c0 = time.perf_counter(), time.process_time()
            steps[key]()
            cpu[key].append(time.process_time() - c0)
            wall[key].append(time.perf_counter() - w0)
    result = {"shape": tuple(batch.input_ids.shape), "labels": tuple(batch.labels.shape)}
    names = sorted({name for _, name in keys})
    for clock, times in (("wall", wall), ("cpu", cpu)):
        result[clock] = {
            name: statistics.median(t for (_, n), values in times.items() if n == name for t in values)
            for name in names
        }
        result[clock + "_ratio"] = result[clock]["xlpe"] / result[clock]["stock"]
        result[clock + "_ratio_unchecked"] = result[clock]["xlpe_unchecked"] / result[clock]["stock"]
        # how far copies of one model differ (memory placement): each copy's median over its model's median
        result[clock + "_instance_spread"] = {
            name: [statistics.median(times[i, name]) / result[clock][name] for i in range(args.instances)]
            for name in names
        }
    return result


def config_fields(text: str) -> dict:
    """FIELD=VALUE[,FIELD=VALUE...], read as xlpe-train's --config_overrides (JSON values, else strings)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    return parse_config_overrides(text)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(SIZES), help="model dims (bench/speed.py's sizes)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=40, help="interleaved steps of each model")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of each model first")
    parser.add_argument("--runs", type=int, default=1, help="independent measurements (fresh models each)")
    parser.add_argument(
        "--instances",
        type=int,
        default=1,
        help="copies of each model per measurement, interleaved and pooled: copies of one model differ by "
        "several %% a step by where their memory lies, which one copy each cannot average out",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=24, help="longest source/target sentence (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--optimizer",
        default="fused",
        choices=sorted(OPTIMIZERS),
        help="AdamW implementation (fused: what the Trainer runs; default: torch's per-parameter loop)",
    )
    parser.add_argument(
        "--xl-config",
        type=config_fields,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="XL PE config fields for the timed model, as xlpe-train's --config_overrides (repeatable), e.g. "
        "reorder_predictor_dropout=0.1",
    )
    add_host_allocator_argument(parser)
    args = parser.parse_args(argv)
    args.xl_config = {field: value for fields in args.xl_config for field, value in fields.items()}
    set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    results = []
    for run in range(args.runs):
        result = measure(args)
        results.append(result)
        print(
            f"run {run + 1}{' ' + str(args.xl_config) if args.xl_config else ''}: "
            f"batch {result['shape']} -> {result['labels']}, {args.threads} thread(s), "
            f"{args.pairs} pairs, AdamW {args.optimizer} | median ms stock {1e3 * result['wall']['stock']:.1f}, XL PE "
            f"{1e3 * result['wall']['xlpe']:.1f} | ratio wall {result['wall_ratio']:.3f} (checks off "
            f"{result['wall_ratio_unchecked']:.3f}), cpu {result['cpu_ratio']:.3f} (checks off "
            f"{result['cpu_ratio_unchecked']:.3f})",
            flush=True,
        )
        if args.instances > 1:
            spread = result["wall_instance_spread"]
            print(
                f"  {args.instances} copies each; a copy's median / its model's (wall): "
                + ", ".join(f"{name} {min(v):.3f}-{max(v):.3f}" for name, v in spread.items()),
                flush=True,
            )
    if args.runs > 1:
        for key in ("wall_ratio", "wall_ratio_unchecked", "cpu_ratio", "cpu_ratio_unchecked"):
            values = [r[key] for r in results]
            print(f"{key}: median {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
    return results


if __name__ == "__main__":
    main()
