"""Timing several models on the same batches: each `Runner` times train steps and `generate` calls of one
model; runs are interleaved across repeats so drift cancels, and each repeat gives one ratio against the
baseline of the same repeat; peak memory by tensor accounting (CPU) or the CUDA allocator."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .speed_models import Batch, Spec

# ---------------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Runner:
    spec: Spec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: list[Batch]
    device: torch.device
    autocast: Callable[[], contextlib.AbstractContextManager]
    clock: str = "cpu"
    with_generation: bool = True
    times: dict = field(default_factory=lambda: {"train_cpu": [], "train_wall": [], "gen_cpu": [], "gen_wall": []})
    results: dict = field(default_factory=dict)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def train_step(self, batch: Batch) -> None:
        self.model.train()
        with self.autocast():
            out = self.forward_with_labels(batch)
        out.loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def forward_with_labels(self, batch: Batch):
        if self.spec.train_forward is not None:
            return self.spec.train_forward(self.model, batch)
        return self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels,
                          **self.spec.train_inputs(batch))

    @torch.no_grad()
    def generate(self, batch: Batch) -> torch.Tensor:
        self.model.eval()
        with self.autocast():
            return self.model.generate(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, num_beams=5, do_sample=False,
                max_new_tokens=batch.new_tokens, min_new_tokens=batch.new_tokens, **self.spec.gen_inputs(batch),
            )

    def time_train(self, steps: int) -> None:
        self.sync()
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            self.train_step(self.batches[i % len(self.batches)])
        self.sync()
        self.times["train_wall"].append(time.perf_counter() - wall)
        self.times["train_cpu"].append(time.process_time() - cpu)

    def time_generate(self, count: int) -> None:
        self.sync()
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            out = self.generate(self.batches[i % len(self.batches)])
        self.sync()
        self.times["gen_wall"].append(time.perf_counter() - wall)
        self.times["gen_cpu"].append(time.process_time() - cpu)
        expected = 1 + self.batches[(count - 1) % len(self.batches)].new_tokens  # decoder start + N tokens
        if out.shape[1] != expected:
            raise RuntimeError(f"{self.spec.name}: generated length {out.shape[1]} != forced {expected}")

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
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_static(runner: Runner, args) -> None:
    """Parameter count, FLOPs per train step / generate call, peak memory (all outside the timed loops)."""
    from torch.utils.flop_counter import FlopCounterMode

    model, batch, device = runner.model, runner.batches[0], runner.device
    params = list(model.parameters())
    runner.results["parameters"] = sum(p.numel() for p in params)

    def fwd_bwd():
        model.train()
        with runner.autocast():
            out = runner.forward_with_labels(batch)
        out.loss.backward()

    with FlopCounterMode(display=False) as counter:
        fwd_bwd()
    runner.optimizer.zero_grad(set_to_none=True)
    runner.results["train_flops"] = counter.get_total_flops()
    if args.gen_flops and runner.with_generation:
        with FlopCounterMode(display=False) as counter:
            runner.generate(batch)
        runner.results["gen_flops"] = counter.get_total_flops()

    if args.no_memory:
        return
    state = [v for s in runner.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    # resident before the step: weights + AdamW moments (gradients are set to None between steps, so their
    # allocation is inside the measured step, as are activations and temporaries)
    resident_train = tensor_bytes(params) + tensor_bytes(state)
    resident_gen = tensor_bytes(params)

    def train_step():
        runner.train_step(batch)

    runner.results["train_peak_bytes"] = resident_train + peak_bytes(train_step, device)
    if runner.with_generation:
        runner.results["gen_peak_bytes"] = resident_gen + peak_bytes(lambda: runner.generate(batch), device)


def ratios(runner: Runner, base: Runner, key: str) -> list[float]:
    return [x / y for x, y in zip(runner.times[key], base.times[key])]


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


