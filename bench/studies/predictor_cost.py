"""What the built-in reorder predictor costs in a CPU training step, by configuration (issue 38).

    python bench/studies/predictor_cost.py --variant "dropout 0.1:reorder_predictor_dropout=0.1,attention=sdpa" \\
        --variant "now:" --variant "width 32:reorder_predictor_hidden_size=32"
    python bench/studies/predictor_cost.py --attention-lengths 12,24,48,96,192     # the attention alone, both ways

The predictor's forward, pairwise loss and backward on detached inputs (what an XL PE training step adds for it,
its AdamW update aside), at `bench/studies/xlpe_step_ratio.py`'s dims and batch: d_model 256 (width d/4 = 64 by
default),
32 sentences of 12-24 tokens, 2 threads, the steady host allocator. The variants run interleaved in one process,
`--steps` times each after a warm-up; the median step in ms. A variant is NAME:FIELD=VALUE,... over the predictor's
config fields (`reorder_predictor_dropout`, `_hidden_size`, `_layers`, `_heads`, `_ffn_size`; the rest as the default
`XLPEMarianConfig` at d 256) and `attention=sdpa` (SDPA at every length) or `attention=written` (the default:
written out up to `WRITTEN_OUT_ATTENTION_MAX_LENGTH` tokens). `--attention-lengths` times `predictor_attention`
alone (forward + backward, 32 sentences x 4 heads of width 16) written out and through SDPA at each length.
An end-to-end step ratio moves by ±2 % a process on this machine (docs/benchmarks/speed.md); a component this size
is measured here to a few percent of itself.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/studies: the sibling studies

from benchlib.timing import add_host_allocator_argument, set_host_allocator  # noqa: E402
from predictor_variants import parse_variant as variant_overrides  # noqa: E402
from xlpe_step_ratio import make_batch  # noqa: E402

from xlpe import XLPEMarianConfig  # noqa: E402
from xlpe.models import reorder_predictor  # noqa: E402

D_MODEL = 256
DEFAULT_LIMIT = reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH  # the package's threshold, restored after timing


def parse_variant(text: str) -> tuple[str, dict, str]:
    """predictor_variants.py's NAME:FIELD=VALUE,... plus `attention=written|sdpa`."""
    name, overrides = variant_overrides(text, extra=("attention",))
    attention = overrides.pop("attention", "written")
    if attention not in ("written", "sdpa"):
        raise argparse.ArgumentTypeError(f"--variant {name}: attention must be 'written' or 'sdpa', got {attention!r}")
    return name, overrides, attention


def predictor_step(overrides: dict, attention: str, batch, seed: int, d_model: int = D_MODEL):
    config = XLPEMarianConfig(d_model=d_model, encoder_attention_heads=4, xl_strategy="combination", **overrides)
    torch.manual_seed(seed)
    predictor = reorder_predictor.ReorderPredictor.from_config(config).train()
    mask = batch.attention_mask.bool()
    inputs = torch.randn(*batch.input_ids.shape, d_model)

    def step() -> None:
        reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH = 0 if attention == "sdpa" else DEFAULT_LIMIT
        scores = predictor(inputs, mask)
        reorder_predictor.reorder_loss(scores, batch.reorder_positions, mask, "pairwise").backward()
        for parameter in predictor.parameters():
            parameter.grad = None

    return step


def interleaved_medians(steps: dict, repeats: int, warmup: int) -> dict:
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)
    reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH = DEFAULT_LIMIT
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def attention_steps(length: int) -> dict:
    q, k, v = (torch.randn(32, 4, length, 16, requires_grad=True) for _ in range(3))
    mask = torch.ones(32, length, dtype=torch.bool)
    mask[16:, length * 3 // 4 :] = False
    keys = reorder_predictor.key_padding_bias(mask)
    upstream = torch.randn(32, 4, length, 16)

    def make(limit: int):
        def step() -> None:
            reorder_predictor.WRITTEN_OUT_ATTENTION_MAX_LENGTH = limit
            reorder_predictor.predictor_attention(q, k, v, keys, 0.0).backward(upstream)
            q.grad = k.grad = v.grad = None

        return step

    return {"written out": make(sys.maxsize), "SDPA": make(0)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", type=parse_variant, action="append", default=[], help="NAME:FIELD=VALUE,...")
    parser.add_argument("--attention-lengths", help="comma-separated token counts: time the attention alone")
    parser.add_argument("--steps", type=int, default=300, help="timed steps of each variant (interleaved)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    add_host_allocator_argument(parser)
    args = parser.parse_args(argv)
    set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    if args.attention_lengths:
        print("| tokens | written out, ms | SDPA, ms |\n|---:|---:|---:|")
        for length in (int(n) for n in args.attention_lengths.split(",")):
            medians = interleaved_medians(attention_steps(length), max(20, 3000 // length), 5)
            print(f"| {length} | {medians['written out']:.2f} | {medians['SDPA']:.2f} |", flush=True)
        return
    if not args.variant:
        parser.error("give at least one --variant (or --attention-lengths)")
    batch = make_batch(32, 24, 8000, 0)
    steps = {name: predictor_step(fields, attention, batch, 0) for name, fields, attention in args.variant}
    medians = interleaved_medians(steps, args.steps, args.warmup)
    first = next(iter(medians.values()))
    print("| predictor variant | ms a step (median) | vs the first |\n|---|---:|---:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.2f} | {value - first:+.2f} |")


if __name__ == "__main__":
    main()
