"""Timing several models on the same batches: each `Runner` times train steps and `generate` calls of one
model under one set of switches (precision, optimizer, compile); runs are interleaved across repeats so drift
cancels, and each repeat gives one ratio against the baseline of the same repeat.

Clocks: on CUDA every step is bracketed by CUDA events recorded on the stream (no host sync inside the timed
loop; one `synchronize` after it), so a step's time is the GPU timeline from its first kernel's launch point to
the next step's; the host's process CPU time is kept beside it (≈ the GPU time means the run is bound by kernel
launches). On CPU: `time.perf_counter` (wall) and `time.process_time` (process CPU time, robust to other jobs on
a shared machine). Warm-up runs whole cycles over the batches until the last cycle times agree (cuBLAS
heuristics, the caching allocator, compilation), with a cap. Peak memory by tensor accounting (CPU) or the CUDA
allocator."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .speed_models import Batch, Spec

# ---------------------------------------------------------------------------------------------------------
# The host allocator (every CPU bench: as xlpe-train runs)
# ---------------------------------------------------------------------------------------------------------


def add_host_allocator_argument(parser) -> None:
    parser.add_argument(
        "--host-allocator",
        default="steady",
        choices=["steady", "default"],
        help='"steady": glibc keeps freed memory, as xlpe-train does on CPU (xlpe/training/host_memory.py); '
        '"default": as the process starts (page faults on the large tensors vary with allocation order)',
    )


def set_host_allocator(choice: str) -> None:
    """`--host-allocator steady`: tune the host allocator before any model is built, and say so."""
    if choice == "steady":
        from xlpe.training.host_memory import keep_freed_host_memory

        print(keep_freed_host_memory(), flush=True)


# ---------------------------------------------------------------------------------------------------------
# Switches and clocks
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Switches:
    """How a model is trained in the bench. precision: "fp32", "autocast" (bf16 autocast, fp32 weights and AdamW
    state, as `xlpe-train --bf16`) or "bf16" (bf16 weights and AdamW state); optimizer: "default" (torch's choice:
    foreach on CUDA, for-loop on CPU), "foreach" or "fused"; compile: torch.compile of the train step's forward
    and loss (inductor), None = eager; compile_shapes: "batch" (batch and length dimensions marked dynamic
    before the first call: one compilation for every batch shape), "auto" (torch's default: recompile, then
    dynamic) or "static" (one compilation per shape)."""

    precision: str = "fp32"
    optimizer: str = "default"
    compile: str | None = None
    compile_shapes: str = "batch"

    def label(self) -> str:
        precision = {"fp32": "fp32", "autocast": "bf16 autocast", "bf16": "bf16 weights"}[self.precision]
        return f"{precision}, {self.optimizer} AdamW, {'compiled' if self.compile else 'eager'}"


class StepClock:
    """Marks between steps; `spans()` gives (wall, cpu) seconds per interval. CUDA: events (synchronised once,
    in `spans`); CPU: perf_counter / process_time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((event, time.process_time()))
        else:
            self.marks.append((time.perf_counter(), time.process_time()))

    def spans(self) -> tuple[list[float], list[float]]:
        if self.cuda:
            torch.cuda.synchronize()
            wall = [a[0].elapsed_time(b[0]) / 1000.0 for a, b in zip(self.marks, self.marks[1:])]
        else:
            wall = [b[0] - a[0] for a, b in zip(self.marks, self.marks[1:])]
        cpu = [b[1] - a[1] for a, b in zip(self.marks, self.marks[1:])]
        self.marks = []
        return wall, cpu


def spread(values: list[float]) -> float:
    """(max - min) / median: the relative spread the flags are about."""
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


# ---------------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Runner:
    spec: Spec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: list[Batch]  # train batches: one cycle = one step on each
    device: torch.device
    autocast: Callable[[], contextlib.AbstractContextManager]
    clock: str = "cpu"
    with_generation: bool = True
    gen_batches: list[Batch] = field(default_factory=list)
    switches: Switches = field(default_factory=Switches)
    name: str = ""  # row name (the spec's, or the spec's with its switches for the stock ladder)
    times: dict = field(default_factory=lambda: {"train_cpu": [], "train_wall": [], "gen_cpu": [], "gen_wall": []})
    step_times: list = field(default_factory=list)  # per repeat: the wall time of every timed train step
    results: dict = field(default_factory=dict)

    def __post_init__(self):
        self.name = self.name or self.spec.name
        self.gen_batches = self.gen_batches or self.batches

        def loss_of(batch: Batch) -> torch.Tensor:
            return self.forward_with_labels(batch).loss

        self.loss_fn = loss_of
        if self.switches.compile:
            dynamic = {"static": False, "auto": None, "batch": None}[self.switches.compile_shapes]
            self.loss_fn = torch.compile(loss_of, backend=self.switches.compile, dynamic=dynamic)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _mark_dynamic(self, batch: Batch) -> None:
        if self.switches.compile and self.switches.compile_shapes == "batch":
            for value in batch.__dict__.values():
                if isinstance(value, torch.Tensor) and value.ndim == 2:
                    torch._dynamo.maybe_mark_dynamic(value, 0)
                    torch._dynamo.maybe_mark_dynamic(value, 1)

    def train_step(self, batch: Batch) -> None:
        self.model.train()
        self._mark_dynamic(batch)
        with self.autocast():
            loss = self.loss_fn(batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def forward_with_labels(self, batch: Batch):
        if self.spec.train_forward is not None:
            return self.spec.train_forward(self.model, batch)
        return self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            labels=batch.labels,
            **self.spec.train_inputs(batch),
        )

    @torch.no_grad()
    def generate(self, batch: Batch) -> torch.Tensor:
        self.model.eval()
        with self.autocast():
            return self.model.generate(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                num_beams=5,
                do_sample=False,
                max_new_tokens=batch.new_tokens,
                min_new_tokens=batch.new_tokens,
                **self.spec.gen_inputs(batch),
            )

    def warm_up(
        self, kind: str, min_cycles: int, max_cycles: int, max_seconds: float, window: int, tolerance: float
    ) -> dict:
        """Whole cycles (a step on every batch, or a call on every generation batch) until the last `window`
        cycle times spread less than `tolerance` (and at least `min_cycles` ran), or `max_cycles` / `max_seconds`
        is reached. Returns {"cycles", "stable", "spread", "first_cycle_s", "cycle_s"}."""
        run = self.train_step if kind == "train" else self.generate
        batches = self.batches if kind == "train" else self.gen_batches
        started, cycles, clock = time.perf_counter(), [], StepClock(self.device)
        while True:
            clock.mark()
            for batch in batches:
                run(batch)
            clock.mark()
            wall, _ = clock.spans()
            cycles.append(wall[0])
            recent = cycles[-window:]
            stable = len(cycles) >= max(min_cycles, window) and spread(recent) < tolerance
            if stable or len(cycles) >= max_cycles or time.perf_counter() - started > max_seconds:
                return {
                    "cycles": len(cycles),
                    "stable": stable,
                    "spread": round(spread(recent), 4),
                    "first_cycle_s": round(cycles[0], 4),
                    "cycle_s": round(statistics.median(recent), 5),
                }

    def time_train(self, steps: int) -> None:
        """`steps` train steps (a multiple of the batch count: whole cycles), each bracketed by clock marks."""
        clock = StepClock(self.device)
        self.sync()
        for i in range(steps):
            clock.mark()
            self.train_step(self.batches[i % len(self.batches)])
        clock.mark()
        wall, cpu = clock.spans()
        self.times["train_wall"].append(sum(wall))
        self.times["train_cpu"].append(sum(cpu))
        self.step_times.append(wall)

    def time_generate(self, count: int) -> None:
        clock = StepClock(self.device)
        self.sync()
        outputs = []
        for i in range(count):
            clock.mark()
            outputs.append((self.generate(self.gen_batches[i % len(self.gen_batches)]), i))
        clock.mark()
        wall, cpu = clock.spans()
        self.times["gen_wall"].append(sum(wall))
        self.times["gen_cpu"].append(sum(cpu))
        for out, i in outputs:
            expected = 1 + self.gen_batches[i % len(self.gen_batches)].new_tokens  # decoder start + N tokens
            if out.shape[1] != expected:
                raise RuntimeError(f"{self.name}: generated length {out.shape[1]} != forced {expected}")

    def primary(self, kind: str) -> list[float]:
        return self.times[f"{kind}_{self.clock}"]


def peak_bytes(fn: Callable[[], None], device: torch.device) -> int:
    """Peak bytes of tensors allocated by `fn` above what was live before it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_static(runner: Runner, args) -> None:
    """Parameter count, counted FLOPs per train step (mean over the cycle's batches, eager forward + backward)
    and per generate call, model FLOPs (`xlpe.training.throughput.train_flops_per_token`, real tokens), peak memory
    (all outside the timed loops)."""
    from torch.utils.flop_counter import FlopCounterMode

    from xlpe.training.throughput import train_flops_per_token

    model, device = runner.model, runner.device
    params = list(model.parameters())
    runner.results["parameters"] = sum(p.numel() for p in params)
    counted = []
    for batch in runner.batches:
        model.train()
        with FlopCounterMode(display=False) as counter:
            with runner.autocast():
                out = runner.forward_with_labels(batch)
            out.loss.backward()
        runner.optimizer.zero_grad(set_to_none=True)
        counted.append(counter.get_total_flops())
    runner.results["train_flops"] = sum(counted) / len(counted)
    per_token = train_flops_per_token(getattr(model, "config", None))
    if per_token is not None:
        source = sum(b.source_tokens for b in runner.batches) / len(runner.batches)
        target = sum(b.target_tokens for b in runner.batches) / len(runner.batches)
        runner.results["train_model_flops"] = per_token[0] * source + per_token[1] * target
    if args.gen_flops and runner.with_generation:  # mean over the generation batches, as the timed calls
        with FlopCounterMode(display=False) as counter:
            for batch in runner.gen_batches:
                runner.generate(batch)
        runner.results["gen_flops"] = counter.get_total_flops() / len(runner.gen_batches)

    if args.no_memory:
        return
    batch = runner.batches[0]
    state = [v for s in runner.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    # resident before the step: weights + AdamW moments (gradients are set to None between steps, so their
    # allocation is inside the measured step, as are activations and temporaries)
    resident_train = tensor_bytes(params) + tensor_bytes(state)
    resident_gen = tensor_bytes(params)
    runner.results["train_peak_bytes"] = resident_train + peak_bytes(lambda: runner.train_step(batch), device)
    if runner.with_generation:
        runner.results["gen_peak_bytes"] = resident_gen + peak_bytes(
            lambda: runner.generate(runner.gen_batches[0]), device
        )


def ratios(runner: Runner, base: Runner, key: str) -> list[float]:
    return [x / y for x, y in zip(runner.times[key], base.times[key])]


def summary(values: list[float]) -> dict:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "spread": spread(values),
        "values": list(values),
    }
