"""Speed overhead of every xlpe model family against its stock Transformers baseline (issue 7, section 1).

One run builds every model with the same dimensions and random init, feeds them the same batches, and
interleaves them across repeats (A B C ... then ... C B A, so slow drift and order effects cancel). For each
repeat it divides the model's time by its baseline's time *from the same repeat*, and reports min / median /
max of that per-repeat ratio (ratio > 1 = slower than stock; the targets are upper bounds on it).

Measured per model:

* train step   forward + backward + AdamW step with `labels` (and the family's training inputs: XL PE gets
               oracle `reorder_positions`, so its reorder predictor and its loss run as in training; DPE gets
               `target_positions`; mvPE+POS gets `pos_tag_ids`/`decoder_pos_tag_ids`). Reported as target
               (label) tokens/s.
* generation   `generate(num_beams=5, max_new_tokens=N, min_new_tokens=N)` with no extra inputs (XL PE
               predicts its reorderings; DPE and mvPE+POS take what they need at test time: POS tags are
               given, as a tagger would supply them). min == max forces every model to emit exactly N tokens
               per hypothesis, so all do identical decoder work (the output length is checked); N = ceil(1.2 x
               the batch's mean source length).
               Reported as sentences/s.
* peak memory  deterministic tensor accounting, not RSS: on CPU the bytes of every tensor allocation and free
               during one train step / one generate call are recorded by `torch.profiler(profile_memory=True)`
               and the running sum's maximum is taken (the CPU analogue of `torch.cuda.max_memory_allocated`);
               what is resident is added: weights and AdamW state (train; gradients are set to None between
               steps, so they are allocated inside the step) or weights (generate).
               On CUDA: `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`.
* clock        on CPU with one thread (the default) ratios divide process CPU time (`time.process_time`),
               which other jobs on a shared machine do not inflate; wall-clock ratios are reported next to
               them. On CUDA: wall clock with `torch.cuda.synchronize()`.
* FLOPs        `torch.utils.flop_counter.FlopCounterMode` over one forward+backward (matmul/attention FLOPs);
               with `--peak-tflops` (default 790 on CUDA: the H200's dense bf16 figure of the issue) the model
               FLOPs utilisation MFU = FLOPs per step / median step time / peak.

Usage (the default is the CPU run recorded in BENCHMARKS.md):

    python bench/speed.py                                         # CPU, small dims, all registered families
    python bench/speed.py --families xlpe --repeats 3             # quicker, one family
    python bench/speed.py --device cuda --dtype bfloat16 --size base   # GPU run (bf16 autocast, Transformer-base)

`--json PATH` writes every raw timing; `--plot PATH` the bar chart (default bench/speed_<device>_<size>.png).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
for path in (REPO_ROOT, Path(__file__).resolve().parent):  # the package from a checkout; bench/ for benchlib
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import transformers  # noqa: E402

import xlpe  # noqa: E402
from benchlib.speed_models import SIZES, all_specs, bart_view, make_batches  # noqa: E402
from benchlib.speed_report import markdown, plot  # noqa: E402
from benchlib.timing import Runner, measure_static, ratios, summary  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def flops_only(runners: list[Runner], by_name: dict) -> dict:
    """Parameters and FLOPs of one forward+backward per model, nothing timed (e.g. base size on a small CPU)."""
    from torch.utils.flop_counter import FlopCounterMode

    rows = {}
    for runner in runners:
        batch = runner.batches[0]
        runner.model.train()
        with FlopCounterMode(display=False) as counter, runner.autocast():
            runner.forward_with_labels(batch).loss.backward()
        rows[runner.spec.name] = {"parameters": sum(p.numel() for p in runner.model.parameters()),
                                  "train_flops": counter.get_total_flops(), "baseline": runner.spec.baseline}
    lines = ["| model | vs | params | train GFLOP/step (fwd+bwd) |", "|---|---|---:|---:|"]
    for name, r in rows.items():
        b = rows.get(r["baseline"]) if r["baseline"] else None
        params, flops = f"{r['parameters'] / 1e6:.2f}M", f"{r['train_flops'] / 1e9:.1f}"
        if b:
            params += f" (×{r['parameters'] / b['parameters']:.3f})"
            flops += f" (×{r['train_flops'] / b['train_flops']:.3f})"
        lines.append(f"| {name} | {r['baseline'] or '—'} | {params} | {flops} |")
    print("\n".join(lines))
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="bfloat16: torch.autocast (fp32 master weights and AdamW state)")
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--families", default=None,
                   help="comma-separated subset of the registered families (default: all registered)")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default: per size)")
    p.add_argument("--mean-len", type=float, default=30.0, help="mean source length in tokens")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (each gives one ratio)")
    p.add_argument("--train-steps", type=int, default=2, help="train steps per model per repeat")
    p.add_argument("--gen-batches", type=int, default=2, help="generate calls per model per repeat")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed train steps and generate calls per model (the FLOP and memory passes add more)")
    p.add_argument("--clock", default="auto", choices=["auto", "cpu", "wall"],
                   help="what the ratios divide: 'cpu' = process CPU time (time.process_time), robust to other jobs "
                        "on a shared machine when running 1 thread; 'wall' = perf_counter (with cuda sync). "
                        "auto: cpu on --device cpu with 1 thread, else wall. Both are recorded either way.")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (default: 1 on cpu, which keeps ratios reproducible on a shared "
                        "machine; the default on cuda)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak for MFU (default: 790 on cuda = H200 dense bf16 per the issue; none on cpu)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    p.add_argument("--skip-generation", action="store_true", help="time training only")
    p.add_argument("--flops-only", action="store_true", help="count parameters and train FLOPs, time nothing")
    p.add_argument("--gen-flops", action="store_true",
                   help="also count generation FLOPs (slow on CPU; implied when an MFU peak is set)")
    p.add_argument("--json", type=Path, default=None, help="write the raw report here")
    p.add_argument("--plot", type=Path, default=None, help="PNG path (default bench/speed_<device>_<size>.png)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    threads = args.threads or (1 if args.device == "cpu" else torch.get_num_threads())
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    device = torch.device(args.device)
    dims = dict(SIZES[args.size])
    if args.batch_size:
        dims["batch_size"] = args.batch_size
    registered = sorted(xlpe.MODEL_FAMILIES)
    families = args.families.split(",") if args.families else registered
    missing = [f for f in families if f not in registered]
    if missing:
        raise SystemExit(f"families {missing} are not registered in this checkout (registered: {registered})")
    clock = args.clock if args.clock != "auto" else ("cpu" if device.type == "cpu" and threads == 1 else "wall")
    peak_tflops = args.peak_tflops if args.peak_tflops is not None else (790.0 if device.type == "cuda" else None)
    args.gen_flops = args.gen_flops or bool(peak_tflops)
    dtype = getattr(torch, args.dtype)

    def autocast():
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    specs = all_specs(families, dims)
    batches = make_batches(max(args.train_steps, args.gen_batches, 2), dims["batch_size"], dims["vocab_size"],
                           args.mean_len, args.seed)
    runners: list[Runner] = []
    for spec in specs:
        torch.manual_seed(args.seed)
        model = spec.build(dims).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model_batches = [(bart_view(b) if spec.bart_layout else b).to(device) for b in batches]
        runners.append(Runner(spec, model, optimizer, model_batches, device, autocast, clock=clock,
                              with_generation=spec.generation and not args.skip_generation))
    by_name = {r.spec.name: r for r in runners}

    print(f"# {len(runners)} models, dims {dims}, threads {threads}, device {device}, {args.dtype}", file=sys.stderr)
    if args.flops_only:
        return flops_only(runners, by_name)
    for runner in runners:  # warm-up (also allocates the AdamW state) and the untimed static measurements
        for i in range(args.warmup):
            runner.train_step(runner.batches[i % len(runner.batches)])
            if runner.with_generation:
                runner.generate(runner.batches[i % len(runner.batches)])
        measure_static(runner, args)
        print(f"#   warmed up {runner.spec.name} ({time.perf_counter() - started:.0f}s)", file=sys.stderr)

    for repeat in range(args.repeats):
        order = runners if repeat % 2 == 0 else runners[::-1]
        for runner in order:
            runner.time_train(args.train_steps)
        for runner in order[::-1]:
            if runner.with_generation:
                runner.time_generate(args.gen_batches)
        print(f"#   repeat {repeat + 1}/{args.repeats} done ({time.perf_counter() - started:.0f}s)", file=sys.stderr)

    tokens_per_step = statistics.mean(b.target_tokens for b in batches[: args.train_steps])
    rows = []
    for runner in runners:
        spec, res = runner.spec, runner.results
        train_step_s = statistics.median(runner.primary("train")) / args.train_steps
        gen_call_s = statistics.median(runner.primary("gen")) / args.gen_batches if runner.with_generation else None
        row = {
            "name": spec.name, "baseline": spec.baseline, "note": spec.note,
            "train_target": spec.train_target, "gen_target": spec.gen_target,
            "train_step_s": train_step_s, "gen_call_s": gen_call_s,
            "train_tokens_per_s": tokens_per_step / train_step_s,
            "gen_sentences_per_s": dims["batch_size"] / gen_call_s if gen_call_s else None,
            "times": runner.times, **res,
        }
        if peak_tflops:
            row["train_mfu"] = res["train_flops"] / train_step_s / (peak_tflops * 1e12)
            row["gen_mfu"] = res["gen_flops"] / gen_call_s / (peak_tflops * 1e12) if "gen_flops" in res else None
        if spec.baseline:
            base = by_name[spec.baseline]
            row["train_ratio"] = summary(ratios(runner, base, f"train_{clock}"))
            gen_ok = runner.with_generation and base.with_generation
            row["gen_ratio"] = summary(ratios(runner, base, f"gen_{clock}")) if gen_ok else None
            other = "wall" if clock == "cpu" else "cpu"
            row["train_ratio_other_clock"] = summary(ratios(runner, base, f"train_{other}"))
            row["gen_ratio_other_clock"] = summary(ratios(runner, base, f"gen_{other}")) if gen_ok else None
        rows.append(row)

    cpu_name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_name = line.split(":", 1)[1].strip()
                break
    report = {
        "command": "python " + " ".join([os.path.relpath(__file__, REPO_ROOT), *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.date.today().isoformat(),
        "machine": {
            "device": torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({os.cpu_count()} cores: {cpu_name})",
            "threads": threads, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(),
            "load_average_1_5_15_min_before_after": [list(load_before), list(os.getloadavg())],
        },
        "size": args.size, "dims": dims, "dtype": args.dtype, "repeats": args.repeats, "clock": clock,
        "train_steps": args.train_steps, "gen_batches": args.gen_batches, "warmup": args.warmup,
        "mean_target_tokens_per_batch": tokens_per_step,
        "source_shape": list(batches[0].input_ids.shape), "new_tokens": batches[0].new_tokens,
        "peak_tflops": peak_tflops, "wall_s": time.perf_counter() - started, "models": rows,
    }
    table = markdown(report)
    print(table)
    print(f"\n{report['command']} | {report['machine']} | {report['date']} | {report['wall_s']:.0f}s")
    plot_path = args.plot or REPO_ROOT / "bench" / f"speed_{args.device}_{args.size}.png"
    plot(report, plot_path)
    print(f"plot: {plot_path}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
