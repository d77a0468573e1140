"""Speed overhead of every xlpe model family against its stock Transformers baseline (issues 7 and 21).

One run builds every model with the same dimensions and random init, feeds them the same batches, and
interleaves them across repeats (A B C ... then ... C B A, so slow drift and order effects cancel). For each
repeat it divides the model's time by its baseline's time *from the same repeat*, and reports min / median /
max of that per-repeat ratio (ratio > 1 = slower than stock; the targets are upper bounds on it). A row whose
per-repeat ratios spread more than `--spread-flag` (10 %) is FLAGGED, as is a model whose warm-up did not
stabilise or whose compiled step has graph breaks: its ratio is not to be trusted.

Like with like: every model of a run, baselines included, runs under the same switches: precision (`--dtype
bfloat16`: autocast with fp32 weights, as `xlpe-train --bf16`; `--weights bfloat16`: bf16 weights and AdamW
state), optimizer (`--optimizer fused|foreach|default`) and `--compile` (torch.compile of the train step's
forward + loss). `--stock-ladder` adds stock MarianMT rows under the other switch combinations (what each
switch buys the stock model, no ratio).

Batches (the same for every model): sentence lengths drawn from a real corpus' length distribution
(`--lengths`, default `newstest-deen`: WMT newstest de->en in a joint 32k BPE, `benchlib/lengths.py`), cut into
token batches as `xlpe-train --max_tokens` cuts them (length-bucketed, longest side x sentences <=
`--max-tokens`; 24,576 at `--size base` = 21-22k real target tokens per batch); `--batches` of them, picked
evenly from short to long, make one cycle. `--batch-size N` makes sentence batches instead, `--lengths
synthetic` the old N(`--mean-len`, (mean/5)^2) lengths. Generation: beam-5 calls on length-bucketed batches of
`--gen-batch-size` sentences.

Measured per model:

* train step   forward + backward + AdamW step with `labels` and the family's training inputs (XL PE: oracle
               `reorder_positions`, so its reorder predictor and its loss run as in training; DPE:
               `target_positions`; mvPE+POS: `pos_tag_ids`/`decoder_pos_tag_ids`). Reported as target (label)
               tokens/s. Per repeat: `--train-steps` steps (whole cycles; >= 50 on CUDA).
* generation   `generate(num_beams=5, max_new_tokens=N, min_new_tokens=N)` with what exists at test time (XL PE
               predicts its reorderings; mvPE+POS gets POS tags), N = ceil(1.2 x the batch's mean source
               length), so every model decodes the same number of tokens (checked). Eager (not compiled).
* warm-up      whole cycles until the last `--stable-window` cycle times spread < `--stable-tolerance` (5 %),
               at least `--warmup` cycles, at most `--warmup-max-cycles` / `--warmup-max-s` (compilation
               happens here; its time is reported as the first cycle's).
* clock        CUDA: CUDA events around every step, one synchronize per timed block; host CPU time beside it.
               CPU with one thread (the default): process CPU time (`time.process_time`), which other jobs on a
               shared machine do not inflate; wall clock beside it.
* FLOPs, MFU   model FLOPs = `xlpe.training.throughput.train_flops_per_token` x real tokens (6 x weight-matrix
               MACs, the formula of `xlpe-train`'s MFU), and counted FLOPs (`torch.utils.flop_counter` over one
               eager forward + backward per batch: every matmul, padding and auxiliary modules included).
               MFU = model FLOPs / step time / peak, with the peak from `--peak-tflops` or the device's dense
               bf16 figure (`xlpe.training.throughput.PEAK_DENSE_BF16_TFLOPS`: H100 SXM 989, H200 989, A100 312;
               the report states the figure); none on CPU.
* peak memory  CPU: tensor allocations of one step recorded by `torch.profiler(profile_memory=True)` plus what
               is resident; CUDA: `torch.cuda.max_memory_allocated`.

Usage:

    python bench/speed.py                                   # CPU, small dims, all registered families
    python bench/speed.py --families xlpe --repeats 3       # quicker, one family
    python bench/speed.py --families baselines              # relative PE, DiSAN-style heads, XL PE + relative PE
    python bench/speed.py --device cuda --dtype bfloat16 --size base                # GPU, eager, fused AdamW
    python bench/speed.py --device cuda --dtype bfloat16 --size base --compile --stock-ladder   # fast switches
    python bench/speed.py --size tiny --repeats 2 --no-plot  # the seconds-long smoke run

`--json PATH` writes every raw timing (rewritten after every repeat, so a run cut short keeps what it
measured); `--markdown PATH` the tables; `--results NAME` puts them into docs/benchmarks/results/speed.json (rendered
into the benchmark pages by bench/render_tables.py); `--plot PATH` the bar chart (default
bench/speed_<device>_<size>.png).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
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
from benchlib import lengths as length_data  # noqa: E402
from benchlib.machine import cpu_description  # noqa: E402
from benchlib.speed_models import (  # noqa: E402
    SIZES,
    Spec,
    all_specs,
    bart_view,
    make_batches,
    sentence_batches,
    token_batches,
)
from benchlib.speed_report import markdown, plot, write_results_tables  # noqa: E402
from benchlib.timing import (  # noqa: E402
    Runner,
    Switches,
    add_host_allocator_argument,
    measure_static,
    ratios,
    set_host_allocator,
    spread,
    summary,
)

import xlpe  # noqa: E402
from xlpe.training.throughput import peak_tflops as device_peak_tflops  # noqa: E402

LADDER = [  # (precision, optimizer, compiled): the stock MarianMT ceiling, one row each
    ("autocast", "foreach", False),
    ("autocast", "fused", False),
    ("bf16", "fused", False),
    ("autocast", "fused", True),
    ("bf16", "fused", True),
]

# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def flops_only(runners: list[Runner]) -> dict:
    """Parameters and FLOPs of one forward+backward per model, nothing timed (e.g. base size on a small CPU)."""
    from torch.utils.flop_counter import FlopCounterMode

    rows = {}
    for runner in runners:
        batch = runner.batches[0]
        runner.model.train()
        with FlopCounterMode(display=False) as counter, runner.autocast():
            runner.forward_with_labels(batch).loss.backward()
        rows[runner.name] = {
            "parameters": sum(p.numel() for p in runner.model.parameters()),
            "train_flops": counter.get_total_flops(),
            "baseline": runner.spec.baseline,
        }
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


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="bfloat16: torch.autocast (fp32 master weights and AdamW state, as xlpe-train --bf16)",
    )
    p.add_argument(
        "--weights",
        default="float32",
        choices=["float32", "bfloat16"],
        help="bfloat16: bf16 weights and AdamW state (no autocast)",
    )
    p.add_argument(
        "--optimizer",
        default=None,
        choices=["default", "foreach", "fused"],
        help="AdamW implementation (default: fused, on every device: what xlpe-train and any Trainer run, "
        "transformers' default optim being adamw_torch_fused with torch >= 2.8, CPU included)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the train step's forward + loss (every model)")
    p.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend (inductor; aot_eager for tests)"
    )
    p.add_argument(
        "--compile-shapes",
        default="batch",
        choices=["batch", "auto", "static"],
        help="batch: batch/length dims dynamic from the first call (one compilation); auto: torch's default",
    )
    p.add_argument(
        "--stock-ladder",
        action="store_true",
        help="add stock MarianMT rows under the other switch combinations (autocast/bf16 weights, "
        "foreach/fused, eager/compiled): what each switch buys, no ratio",
    )
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument(
        "--families", default=None, help="comma-separated subset of the registered families (default: all registered)"
    )
    p.add_argument(
        "--rows",
        default=None,
        help="';'-separated row names to time (their baselines come along), e.g. 'XL PE combination;DPE'; "
        "default: every row of --families",
    )
    p.add_argument(
        "--lengths",
        default="newstest-deen",
        help="stored sentence-length distribution (benchlib/lengths_<name>.json), or 'synthetic'",
    )
    p.add_argument(
        "--max-tokens",
        type=positive(int),
        default=None,
        help="token batches: padded tokens (longest side x sentences) per batch (default: per size)",
    )
    p.add_argument(
        "--batch-size",
        type=positive(int),
        default=None,
        help="sentence batches of N sentences instead of token batches",
    )
    p.add_argument(
        "--batches",
        type=positive(int),
        default=None,
        help="distinct train batches in one cycle, short to long (default: 8 on cuda, 2 on cpu)",
    )
    p.add_argument("--mean-len", type=positive(float), default=30.0, help="--lengths synthetic: mean source length")
    p.add_argument(
        "--gen-batch-size", type=positive(int), default=None, help="sentences per generate call (default: per size)"
    )
    p.add_argument("--repeats", type=positive(int), default=5, help="interleaved repeats (each gives one ratio)")
    p.add_argument(
        "--train-steps",
        type=positive(int),
        default=None,
        help="train steps per model per repeat, rounded up to whole cycles (default: >= 50 on cuda, one cycle on cpu)",
    )
    p.add_argument("--gen-batches", type=positive(int), default=2, help="generate calls per model per repeat")
    p.add_argument(
        "--warmup", type=int, default=None, help="at least this many warm-up cycles (default: 3 cuda, 2 cpu)"
    )
    p.add_argument(
        "--warmup-max-cycles", type=positive(int), default=None, help="warm-up cap in cycles (30 cuda, 4 cpu)"
    )
    p.add_argument(
        "--warmup-max-s", type=positive(float), default=None, help="warm-up cap in seconds per model (300 cuda, 60 cpu)"
    )
    p.add_argument(
        "--stable-window", type=positive(int), default=None, help="cycles compared for stability (3 cuda, 2 cpu)"
    )
    p.add_argument("--stable-tolerance", type=positive(float), default=0.05, help="stable: spread of the window < this")
    p.add_argument(
        "--spread-flag", type=positive(float), default=0.10, help="flag ratios whose per-repeat spread exceeds this"
    )
    p.add_argument("--fail-on-flag", action="store_true", help="exit with status 3 when any row is flagged")
    p.add_argument(
        "--time-budget",
        type=positive(float),
        default=None,
        help="seconds for the whole run: after the first repeat, fewer repeats (>= 3) when needed to fit",
    )
    p.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="what the ratios divide: 'cpu' = process CPU time, 'wall' = wall clock (CUDA events on cuda). "
        "auto: cpu on --device cpu with 1 thread, else wall. Both are recorded either way.",
    )
    p.add_argument(
        "--threads",
        type=positive(int),
        default=None,
        help="torch.set_num_threads (default: 1 on cpu, which keeps ratios reproducible on a shared "
        "machine; the default on cuda)",
    )
    p.add_argument("--seed", type=int, default=0)
    add_host_allocator_argument(p)
    p.add_argument(
        "--peak-tflops",
        type=positive(float),
        default=None,
        help="peak for MFU (default: the device's dense bf16 figure from the table; none on cpu)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    p.add_argument("--skip-generation", action="store_true", help="time training only")
    p.add_argument("--flops-only", action="store_true", help="count parameters and train FLOPs, time nothing")
    p.add_argument(
        "--gen-flops",
        action="store_true",
        help="also count generation FLOPs (slow on CPU; implied when an MFU peak is set)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the raw report here (also after every repeat)")
    p.add_argument("--markdown", type=Path, default=None, help="write the Markdown tables here")
    p.add_argument(
        "--results",
        default=None,
        metavar="NAME",
        help="also put the tables into docs/benchmarks/results/speed.json as speed/NAME and speed/NAME-figures "
        "(mark them in a page, then python bench/render_tables.py)",
    )
    p.add_argument("--plot", type=Path, default=None, help="PNG path (default bench/speed_<device>_<size>.png)")
    p.add_argument("--no-plot", action="store_true", help="no bar chart")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available here")
    if args.weights == "bfloat16" and args.dtype == "bfloat16":
        p.error("--weights bfloat16 already computes in bf16; drop --dtype bfloat16 (autocast)")
    cuda = args.device == "cuda"
    defaults = {
        "optimizer": "fused",
        "batches": 8 if cuda else 2,
        "warmup": 3 if cuda else 2,
        "warmup_max_cycles": 30 if cuda else 4,
        "warmup_max_s": 300.0 if cuda else 60.0,
        "stable_window": 3 if cuda else 2,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warmup < 1:
        p.error(f"--warmup must be >= 1 cycle, got {args.warmup}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.device == "cpu":
        set_host_allocator(args.host_allocator)
    threads = args.threads or (1 if args.device == "cpu" else torch.get_num_threads())
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    device = torch.device(args.device)
    dims = dict(SIZES[args.size])
    registered = sorted(xlpe.MODEL_FAMILIES)
    families = args.families.split(",") if args.families else registered
    missing = [f for f in families if f not in registered and f != "baselines"]  # baselines: XL PE Table 1's rows
    if missing:
        raise SystemExit(f"families {missing} are not registered in this checkout (registered: {registered})")
    clock = args.clock if args.clock != "auto" else ("cpu" if device.type == "cpu" and threads == 1 else "wall")
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else None
    table_peak = device_peak_tflops(device_name)
    peak = args.peak_tflops or table_peak
    peak_source = (
        "--peak-tflops"
        if args.peak_tflops
        else f"dense bf16 peak of {device_name} (xlpe.training.throughput.PEAK_DENSE_BF16_TFLOPS)"
        if table_peak
        else None
    )
    args.gen_flops = args.gen_flops or bool(peak)
    precision = "bf16" if args.weights == "bfloat16" else ("autocast" if args.dtype == "bfloat16" else "fp32")
    main_switches = Switches(
        precision, args.optimizer, args.compile_backend if args.compile else None, args.compile_shapes
    )
    if args.compile or args.stock_ladder:
        import torch._dynamo.config as dynamo_config

        for name in (
            "recompile_limit",
            "cache_size_limit",
            "accumulated_recompile_limit",
            "accumulated_cache_size_limit",
        ):
            if hasattr(dynamo_config, name):  # every runner's step is one code object: one entry each
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), 256))

    # --- batches (the same sentences for every model) ---------------------------------------------------
    if args.lengths == "synthetic":
        distribution = None
        count = max(args.batches, 2)
        batches = make_batches(
            count, args.batch_size or dims["batch_size"], dims["vocab_size"], args.mean_len, args.seed
        )
        gen_set = make_batches(
            args.gen_batches,
            args.gen_batch_size or dims["gen_batch_size"],
            dims["vocab_size"],
            args.mean_len,
            args.seed + 1,
        )
        batching = {
            "kind": "sentences (synthetic lengths)",
            "sentences": args.batch_size or dims["batch_size"],
            "mean_len": args.mean_len,
        }
    else:
        try:
            distribution = length_data.load(args.lengths)
        except ValueError as error:
            raise SystemExit(str(error)) from None
        if args.batch_size:
            batches = sentence_batches(distribution, args.batch_size, args.batches, dims["vocab_size"], args.seed)
            batching = {"kind": "sentences, length-bucketed", "sentences": args.batch_size}
        else:
            max_tokens = args.max_tokens or dims["max_tokens"]
            try:
                batches = token_batches(distribution, max_tokens, args.batches, dims["vocab_size"], args.seed)
            except ValueError as error:
                raise SystemExit(str(error)) from None
            batching = {"kind": "tokens, length-bucketed (xlpe-train --max_tokens)", "max_tokens": max_tokens}
        gen_set = sentence_batches(
            distribution, args.gen_batch_size or dims["gen_batch_size"], args.gen_batches, dims["vocab_size"], args.seed
        )
    cycle = len(batches)
    steps = args.train_steps or (math.ceil(50 / cycle) * cycle if device.type == "cuda" else cycle)
    steps = math.ceil(steps / cycle) * cycle
    batching.update(
        {
            "lengths": distribution["description"] if distribution else "synthetic",
            "batches_per_cycle": cycle,
            "sentences_per_batch": [int(b.input_ids.shape[0]) for b in batches],
            "padded_shapes": [[int(b.input_ids.shape[1]), int(b.labels.shape[1])] for b in batches],
            "target_tokens_per_batch": statistics.mean(b.target_tokens for b in batches),
            "source_tokens_per_batch": statistics.mean(b.source_tokens for b in batches),
            "generation_sentences": [int(b.input_ids.shape[0]) for b in gen_set],
            "generation_new_tokens": [b.new_tokens for b in gen_set],
        }
    )

    # --- models ----------------------------------------------------------------------------------------------
    specs = [(spec, main_switches, spec.name) for spec in all_specs(families, dims)]
    if args.rows:
        keep = {name.strip() for name in args.rows.split(";") if name.strip()}
        unknown = keep - {s.name for s, _, _ in specs}
        if unknown:
            raise SystemExit(f"--rows {sorted(unknown)}: no such row (rows: {[s.name for s, _, _ in specs]})")
        keep |= {s.baseline for s, _, _ in specs if s.name in keep and s.baseline}
        specs = [entry for entry in specs if entry[0].name in keep]
    if args.stock_ladder:
        marian = next(spec for spec in all_specs([], dims) if spec.name == "Marian")
        has_marian = any(spec.name == "Marian" for spec, _, _ in specs)
        for precision_, optimizer, compiled in LADDER:
            switches = Switches(precision_, optimizer, args.compile_backend if compiled else None, args.compile_shapes)
            if switches != main_switches or not has_marian:
                ladder = Spec(marian.name, marian.build, generation=False, note="stock, switch ladder")
                specs.append((ladder, switches, f"Marian [{switches.label()}]"))
    runners: list[Runner] = []
    for spec, switches, name in specs:
        torch.manual_seed(args.seed)
        model = spec.build(dims).to(device)
        if switches.precision == "bf16":
            model = model.to(torch.bfloat16)
        implementation = {"fused": {"fused": True}, "foreach": {"foreach": True}, "default": {}}[switches.optimizer]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **implementation)
        view = (lambda b: bart_view(b).to(device)) if spec.bart_layout else (lambda b: b.to(device))
        autocast = (
            (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16))
            if switches.precision == "autocast"
            else contextlib.nullcontext
        )
        runners.append(
            Runner(
                spec,
                model,
                optimizer,
                [view(b) for b in batches],
                device,
                autocast,
                clock=clock,
                with_generation=spec.generation and not args.skip_generation,
                gen_batches=[view(b) for b in gen_set],
                switches=switches,
                name=name,
            )
        )
    by_name = {r.name: r for r in runners}

    print(
        f"# {len(runners)} models, dims {dims}, threads {threads}, device {device}, {main_switches.label()}, "
        f"{batching['kind']}: {batching['target_tokens_per_batch']:.0f} target tokens per batch",
        file=sys.stderr,
    )
    if args.flops_only:
        return flops_only(runners)
    flags: list[str] = []
    for runner in runners:  # warm-up until stable, then the untimed static measurements
        counters = None
        if runner.switches.compile:
            from torch._dynamo.utils import counters

            counters["graph_break"].clear()
        warm = args.warmup, args.warmup_max_cycles, args.warmup_max_s, args.stable_window, args.stable_tolerance
        runner.results["warmup_train"] = runner.warm_up("train", *warm)
        if runner.with_generation:
            runner.results["warmup_gen"] = runner.warm_up(
                "gen", 1, max(2, args.warmup), args.warmup_max_s, min(2, args.stable_window), args.stable_tolerance
            )
        if counters is not None:
            runner.results["graph_breaks"] = sum(counters["graph_break"].values())
            if runner.results["graph_breaks"]:
                flags.append(
                    f"{runner.name}: {runner.results['graph_breaks']} graph break(s) in the compiled train step"
                )
        for kind in ("train", "gen"):
            warm = runner.results.get(f"warmup_{kind}")
            if warm and not warm["stable"]:
                flags.append(
                    f"{runner.name}: {kind} warm-up did not stabilise ({warm['cycles']} cycles, last spread "
                    f"{100 * warm['spread']:.1f}% >= {100 * args.stable_tolerance:.0f}%)"
                )
        measure_static(runner, args)
        print(
            f"#   warmed up {runner.name} ({time.perf_counter() - started:.0f}s; train: "
            f"{runner.results['warmup_train']['cycles']} cycles, "
            f"first {runner.results['warmup_train']['first_cycle_s']:.1f}s)",
            file=sys.stderr,
        )

    def build_report(repeats_done: int) -> dict:
        return assemble(
            args,
            runners,
            by_name,
            batches,
            steps,
            clock,
            peak,
            peak_source,
            dims,
            batching,
            flags,
            repeats_done,
            started,
            load_before,
            threads,
            main_switches,
            argv,
        )

    repeats, timed_start = args.repeats, time.perf_counter()
    repeat = 0
    while repeat < repeats:
        order = runners if repeat % 2 == 0 else runners[::-1]
        for runner in order:
            runner.time_train(steps)
        for runner in order[::-1]:
            if runner.with_generation:
                runner.time_generate(args.gen_batches)
        repeat += 1
        print(f"#   repeat {repeat}/{repeats} done ({time.perf_counter() - started:.0f}s)", file=sys.stderr)
        if repeat == 1 and args.time_budget:
            per_repeat = time.perf_counter() - timed_start
            left = args.time_budget - (time.perf_counter() - started) - 15  # the report, plot, files
            fitting = max(3, 1 + int(left // per_repeat))
            if fitting < repeats:
                flags.append(
                    f"repeats reduced from {repeats} to {fitting} to fit --time-budget {args.time_budget:.0f}s"
                )
                print(f"#   {flags[-1]}", file=sys.stderr)
                repeats = fitting
        if args.json:
            args.json.write_text(json.dumps(build_report(repeat), indent=1))
    report = build_report(repeat)
    table = markdown(report)
    print(table)
    print(f"\n{report['command']} | {report['machine']} | {report['date']} | {report['wall_s']:.0f}s")
    if args.markdown:
        args.markdown.write_text(table + "\n")
    if args.results:
        print(f"results: {', '.join(write_results_tables(report, args.results))}", file=sys.stderr)
    if not args.no_plot:
        plot_path = args.plot or REPO_ROOT / "bench" / f"speed_{args.device}_{args.size}.png"
        plot(report, plot_path)
        print(f"plot: {plot_path}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if report["flags"]:
        print("FLAGGED:\n  " + "\n  ".join(report["flags"]), file=sys.stderr)
        if args.fail_on_flag:
            raise SystemExit(3)
    return report


def assemble(
    args,
    runners,
    by_name,
    batches,
    steps,
    clock,
    peak,
    peak_source,
    dims,
    batching,
    flags,
    repeats_done,
    started,
    load_before,
    threads,
    main_switches,
    argv,
) -> dict:
    """The report dict: one row per model (times, tokens/s, MFU, ratios with their spread and flag) and the run's
    settings, machine and flags."""
    device = runners[0].device
    tokens_per_step = statistics.mean(b.target_tokens for b in batches)
    rows, flags = [], list(flags)
    for runner in runners:
        spec, res = runner.spec, runner.results
        train_step_s = statistics.median(runner.primary("train")) / steps
        gen_call_s = statistics.median(runner.primary("gen")) / args.gen_batches if runner.with_generation else None
        row = {
            "name": runner.name,
            "baseline": spec.baseline if runner.name == spec.name else None,
            "note": spec.note,
            "switches": runner.switches.label(),
            "train_target": spec.train_target,
            "gen_target": spec.gen_target,
            "train_step_s": train_step_s,
            "gen_call_s": gen_call_s,
            "train_tokens_per_s": tokens_per_step / train_step_s,
            "gen_sentences_per_s": (
                statistics.mean(b.input_ids.shape[0] for b in runner.gen_batches) / gen_call_s if gen_call_s else None
            ),
            "step_time_spread": statistics.median(spread(s) for s in runner.step_times) if runner.step_times else None,
            "times": runner.times,
            **res,
        }
        if peak:
            scale = peak * 1e12
            row["train_mfu"] = res["train_model_flops"] / train_step_s / scale if "train_model_flops" in res else None
            row["train_counted_flops_utilisation"] = res["train_flops"] / train_step_s / scale
            row["gen_mfu"] = res["gen_flops"] / gen_call_s / scale if gen_call_s and "gen_flops" in res else None
        if row["baseline"]:
            base = by_name[row["baseline"]]
            row["train_ratio"] = summary(ratios(runner, base, f"train_{clock}"))
            gen_ok = runner.with_generation and base.with_generation
            row["gen_ratio"] = summary(ratios(runner, base, f"gen_{clock}")) if gen_ok else None
            other = "wall" if clock == "cpu" else "cpu"
            row["train_ratio_other_clock"] = summary(ratios(runner, base, f"train_{other}"))
            row["gen_ratio_other_clock"] = summary(ratios(runner, base, f"gen_{other}")) if gen_ok else None
            for kind in ("train", "gen"):
                s = row[f"{kind}_ratio"]
                if s is not None and len(s["values"]) > 1 and s["spread"] > args.spread_flag:
                    flags.append(
                        f"{runner.name}: {kind} ratios spread {100 * s['spread']:.1f}% over {len(s['values'])} "
                        f"repeats (> {100 * args.spread_flag:.0f}%): {', '.join(f'{v:.3f}' for v in s['values'])}"
                    )
            row["flagged"] = any(f.startswith(f"{runner.name}:") for f in flags)
        rows.append(row)

    machine = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({cpu_description()})",
        "threads": threads,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "load_average_1_5_15_min_before_after": [list(load_before), list(os.getloadavg())],
    }
    return {
        "command": "python "
        + shlex.join([os.path.relpath(__file__, REPO_ROOT), *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.date.today().isoformat(),
        "machine": machine,
        "size": args.size,
        "dims": dims,
        "dtype": args.dtype,
        "switches": main_switches.label(),
        "precision": main_switches.precision,
        "optimizer": main_switches.optimizer,
        "compile": main_switches.compile,
        "repeats": repeats_done,
        "repeats_asked": args.repeats,
        "clock": clock,
        "clock_detail": "CUDA events per step"
        if device.type == "cuda"
        else ("process CPU time" if clock == "cpu" else "perf_counter"),
        "train_steps": steps,
        "gen_batches": args.gen_batches,
        "batching": batching,
        "warmup": {
            "min_cycles": args.warmup,
            "max_cycles": args.warmup_max_cycles,
            "max_s": args.warmup_max_s,
            "window": args.stable_window,
            "tolerance": args.stable_tolerance,
        },
        "mean_target_tokens_per_batch": tokens_per_step,
        "source_shape": list(batches[0].input_ids.shape),
        "new_tokens": batches[0].new_tokens,
        "peak_tflops": peak,
        "peak_source": peak_source,
        "spread_flag": args.spread_flag,
        "flags": flags,
        "wall_s": time.perf_counter() - started,
        "models": rows,
    }


if __name__ == "__main__":
    main()
