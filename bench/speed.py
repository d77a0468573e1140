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
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO_ROOT))

import transformers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
)

import xlpe

# ---------------------------------------------------------------------------------------------------------
# Sizes and data
# ---------------------------------------------------------------------------------------------------------

SIZES = {
    # the CPU default: small enough for ~10 min on 2 cores with every family
    "small": {"d_model": 256, "ffn": 1024, "heads": 4, "encoder_layers": 3, "decoder_layers": 3, "vocab_size": 8000,
              "batch_size": 32},
    # Transformer-base (Vaswani et al. 2017) for the GPU run
    "base": {"d_model": 512, "ffn": 2048, "heads": 8, "encoder_layers": 6, "decoder_layers": 6, "vocab_size": 32000,
             "batch_size": 128},
}

PAD, EOS, BART_BOS, BART_PAD, BART_EOS = 0, 1, 0, 1, 2
FIRST_WORD_ID = 3  # token ids below this are special in both the Marian and the BART layout
FIRST_TAG_ID, NUM_POS_TAG_IDS = 3, 48  # mvPE+POS's default (nltk-en, Penn) tag ids: 3 specials, then 45 tags


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, S], right padded with PAD, EOS closes each row
    attention_mask: torch.Tensor
    labels: torch.Tensor  # [B, T], -100 on padding, EOS closes each row
    reorder_positions: torch.Tensor  # oracle-style XL order: a permutation of the movable tokens, EOS fixed
    target_positions: torch.Tensor  # DPE supervision: target rank of each source token, -100 where unaligned
    pos_tag_ids: torch.Tensor
    decoder_pos_tag_ids: torch.Tensor
    new_tokens: int  # generation length (min == max) for this batch

    @property
    def target_tokens(self) -> int:
        return int((self.labels != -100).sum())

    def to(self, device) -> Batch:
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Batch(**moved)


def make_batches(count: int, batch_size: int, vocab_size: int, mean_len: float, seed: int) -> list[Batch]:
    """Synthetic batches with realistic lengths: a length-bucketed batcher's batch of sentences whose source
    lengths are N(mean_len, (mean_len/5)^2) clipped to [8, 2 mean_len], target length = source x U(0.9, 1.3).
    Generation length (forced, min == max): ceil(1.2 x the batch's mean source length)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        src_len = (torch.randn(batch_size, generator=gen) * mean_len / 5 + mean_len).round().clamp(8, 2 * mean_len).long()
        tgt_len = (src_len.float() * (0.9 + 0.4 * torch.rand(batch_size, generator=gen))).round().clamp(min=4).long()
        S, T = int(src_len.max()), int(tgt_len.max())
        input_ids = torch.full((batch_size, S), PAD)
        labels = torch.full((batch_size, T), -100)
        reorder = torch.arange(S).repeat(batch_size, 1)
        target_positions = torch.full((batch_size, S), -100)
        pos = torch.zeros(batch_size, S, dtype=torch.long)
        dpos = torch.zeros(batch_size, T, dtype=torch.long)
        for b in range(batch_size):
            n, m = int(src_len[b]), int(tgt_len[b])
            input_ids[b, : n - 1] = torch.randint(FIRST_WORD_ID, vocab_size, (n - 1,), generator=gen)
            input_ids[b, n - 1] = EOS
            labels[b, : m - 1] = torch.randint(FIRST_WORD_ID, vocab_size, (m - 1,), generator=gen)
            labels[b, m - 1] = EOS
            reorder[b, : n - 1] = torch.randperm(n - 1, generator=gen)  # EOS (index n-1) keeps its place
            ranks = torch.randperm(n - 1, generator=gen)
            aligned = torch.rand(n - 1, generator=gen) < 0.85  # some source words unaligned, as with real alignments
            target_positions[b, : n - 1] = torch.where(aligned, ranks, torch.full_like(ranks, -100))
            pos[b, :n] = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (n,), generator=gen)
            dpos[b, :m] = torch.randint(FIRST_TAG_ID, NUM_POS_TAG_IDS, (m,), generator=gen)
        attention_mask = (torch.arange(S)[None] < src_len[:, None]).long()
        batches.append(Batch(input_ids, attention_mask, labels, reorder, target_positions, pos, dpos, math.ceil(1.2 * float(src_len.float().mean()))))
    return batches


def bart_view(batch: Batch) -> Batch:
    """The same sentences in BART's special-token layout (pad 1, eos 2)."""
    input_ids = batch.input_ids.clone()
    input_ids[batch.input_ids == PAD] = BART_PAD
    input_ids[batch.input_ids == EOS] = BART_EOS
    labels = batch.labels.clone()
    labels[batch.labels == EOS] = BART_EOS
    return Batch(**{**batch.__dict__, "input_ids": input_ids, "labels": labels})


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


def shared_kwargs(dims: dict) -> dict:
    """The dims every config of one run shares (Marian and BART spell them the same)."""
    return {
        "vocab_size": dims["vocab_size"], "d_model": dims["d_model"], "encoder_layers": dims["encoder_layers"],
        "decoder_layers": dims["decoder_layers"], "encoder_attention_heads": dims["heads"],
        "decoder_attention_heads": dims["heads"], "encoder_ffn_dim": dims["ffn"], "decoder_ffn_dim": dims["ffn"],
        "max_position_embeddings": 512,
    }


def marian_kwargs(dims: dict, **overrides) -> dict:
    special = {"pad_token_id": PAD, "eos_token_id": EOS, "decoder_start_token_id": PAD, "forced_eos_token_id": None}
    return {**shared_kwargs(dims), **special, **overrides}


def bart_kwargs(dims: dict, **overrides) -> dict:
    special = {"pad_token_id": BART_PAD, "bos_token_id": BART_BOS, "eos_token_id": BART_EOS,
               "decoder_start_token_id": BART_EOS, "forced_bos_token_id": None, "forced_eos_token_id": None}
    return {**shared_kwargs(dims), **special, **overrides}


@dataclass
class Spec:
    name: str
    build: Callable[[dict], torch.nn.Module]
    baseline: str | None = None  # name of the spec this one is divided by (None: it is a baseline)
    train_inputs: Callable[[Batch], dict] = lambda batch: {}
    gen_inputs: Callable[[Batch], dict] = lambda batch: {}
    generation: bool = True  # False: not timed in generation (e.g. a training-only variant of another row)
    train_forward: Callable | None = None  # (model, batch) -> output with .loss; default model(**inputs)
    bart_layout: bool = False
    train_target: float | None = None
    gen_target: float | None = None
    note: str = ""


def xl_spec(strategy: str, train_positions: str = "oracle", label: str = "", **config) -> Spec:
    def build(dims):
        xl_heads = 0 if strategy == "in" else max(1, dims["heads"] // 4)
        cfg = xlpe.XLPEMarianConfig(**marian_kwargs(dims, xl_strategy=strategy, xl_heads=xl_heads,
                                                    xl_train_positions=train_positions, **config))
        return xlpe.XLPEMarianMTModel(cfg)

    suffix = "" if train_positions == "oracle" else ", train on predicted positions"
    return Spec(
        f"XL PE {strategy}{suffix}{label}", build, baseline="Marian",
        train_inputs=lambda b: {"reorder_positions": b.reorder_positions},
        train_target=1.03, gen_target=1.05,
        note="tau = H/4" if strategy != "in" else "",
    )


def external_positions_forward(model, batch: Batch):
    """The paper's setting: XL positions come from an external reorderer (lader), so the translation model's
    training step has no predictor. The encoder is called without `compute_reorder_loss` (the MT model's forward
    always asks for the predictor's loss when positions and labels are given), then the model on its output."""
    encoder_outputs = model.model.encoder(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, reorder_positions=batch.reorder_positions
    )
    return model(attention_mask=batch.attention_mask, encoder_outputs=encoder_outputs, labels=batch.labels)


def all_specs(families: list[str], dims: dict) -> list[Spec]:
    specs = [Spec("Marian", lambda d: MarianMTModel(MarianConfig(**marian_kwargs(d))), note="stock")]
    if "xlpe" in families:
        specs += [xl_spec("in"), xl_spec("head"), xl_spec("combination"), xl_spec("combination", "predicted")]
        specs[-1].generation = False  # at inference it is the "combination" model: nothing else to time
        specs[-1].note = "xl_train_positions='predicted': the translation loss sees the predictor's order"
        # the predictor's width is the one knob that matters for the training overhead (see BENCHMARKS.md):
        # also measure a predictor a quarter of the model's width when the package default differs from it
        default_hidden = xlpe.XLPEMarianConfig(**marian_kwargs(dims)).reorder_predictor_hidden_size
        heads = xlpe.XLPEMarianConfig().reorder_predictor_heads
        quarter = max(8 * heads, dims["d_model"] // (4 * heads) * heads)
        if quarter != default_hidden:
            specs.append(xl_spec("combination", label=f", predictor h={quarter}", reorder_predictor_hidden_size=quarter))
            specs[-1].note = f"predictor hidden {quarter} = d_model/4 instead of the default {default_hidden}"
        external = xl_spec("combination", label=", external positions (no predictor)")
        external.train_forward = external_positions_forward
        external.gen_inputs = lambda b: {"reorder_positions": b.reorder_positions}
        external.note = ("the paper's setting: reorderings from an external tool (its cost not counted), "
                         "the predictor never runs")
        specs.append(external)
    if "dpe" in families:
        from xlpe.configuration_dpe import (
            DPEMarianConfig,  # registered by `import xlpe` when present
        )

        dpe_layers = DPEMarianConfig().dpe_layers
        deep = f"Marian {dims['encoder_layers'] + dpe_layers}E"
        specs.append(Spec(
            deep, lambda d: MarianMTModel(MarianConfig(**marian_kwargs(d, encoder_layers=d["encoder_layers"] + dpe_layers))),
            note=f"stock, +{dpe_layers} encoder layers (= DPE's parameters; the paper's 8E at base size)",
        ))
        specs.append(Spec(
            "DPE", lambda d: xlpe.get_family("dpe").generation_model_class(DPEMarianConfig(**marian_kwargs(d))),
            baseline=deep, train_inputs=lambda b: {"target_positions": b.target_positions},
            train_target=1.03, gen_target=1.03, note=f"{dpe_layers} DPE layers",
        ))
    if "mvpe_pos" in families:
        family = xlpe.get_family("mvpe_pos")
        specs.append(Spec("BART", lambda d: BartForConditionalGeneration(BartConfig(**bart_kwargs(d))),
                          bart_layout=True, note="stock"))
        pos_inputs = lambda b: {"pos_tag_ids": b.pos_tag_ids, "decoder_pos_tag_ids": b.decoder_pos_tag_ids}
        specs.append(Spec(
            "mvPE+POS", lambda d: family.generation_model_class(family.config_class(**bart_kwargs(d))),
            baseline="BART", train_inputs=pos_inputs, gen_inputs=lambda b: {"pos_tag_ids": b.pos_tag_ids},
            bart_layout=True, train_target=1.05, gen_target=1.05,
        ))
    return specs


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


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def fmt_ratio(s: dict, target: float | None) -> str:
    text = f"**{s['median']:.3f}** ({s['min']:.3f}–{s['max']:.3f})"
    if target is not None:
        text += " ✅" if s["median"] <= target else " ❌"
    return text


def fmt_target(target: float | None) -> str:
    return f"≤ {target:.2f}" if target else "—"


def markdown(report: dict) -> str:
    """Two tables: the ratios (what the targets are about), then the absolute figures."""
    rows, clock = report["models"], report["clock"]
    other = "wall" if clock == "cpu" else "CPU"
    clock_name = "CPU-time" if clock == "cpu" else "wall-clock"
    by_name = {r["name"]: r for r in rows}
    out = [
        (f"| model | vs | train step ratio ({clock_name}), median (min–max) | {other} median | target | "
         f"beam-5 generation ratio ({clock_name}), median (min–max) | {other} median | target |"),
        "|---|---|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        if not r["baseline"]:
            continue
        if r["gen_ratio"] is not None:
            gen = (f"{fmt_ratio(r['gen_ratio'], r['gen_target'])} | {r['gen_ratio_other_clock']['median']:.3f} | "
                   f"{fmt_target(r['gen_target'])}")
        else:
            gen = "not timed | — | —"
        out.append(
            f"| {r['name']} | {r['baseline']} | {fmt_ratio(r['train_ratio'], r['train_target'])} | "
            f"{r['train_ratio_other_clock']['median']:.3f} | {fmt_target(r['train_target'])} | "
            f"{gen} |"
        )
    mfu = bool(report["peak_tflops"])
    out += [
        "",
        f"| model | params | train tokens/s ({clock_name}) | generation sentences/s ({clock_name}) | "
        "train GFLOP/step | train peak MiB | generation peak MiB |" + (" train MFU | generation MFU |" if mfu else ""),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if mfu else ""),
    ]
    for r in rows:
        b = by_name.get(r["baseline"]) if r["baseline"] else None

        def rel(key, fmt, scale=1.0, unit="", r=r, b=b):
            if key not in r:
                return "—"
            text = format(r[key] / scale, fmt) + unit
            return text + (f" (×{r[key] / b[key]:.3f})" if b is not None and key in b else "")

        line = (
            f"| {r['name']} | {rel('parameters', '.2f', 1e6, 'M')} | {r['train_tokens_per_s']:.0f} | "
            f"{format(r['gen_sentences_per_s'], '.2f') if r['gen_sentences_per_s'] else '—'} | {rel('train_flops', '.1f', 1e9)} | "
            f"{rel('train_peak_bytes', '.0f', 2**20)} | {rel('gen_peak_bytes', '.0f', 2**20)} |"
        )
        if mfu:
            gen_mfu = f"{100 * r['gen_mfu']:.1f}%" if r.get("gen_mfu") is not None else "—"
            line += f" {100 * r['train_mfu']:.1f}% | {gen_mfu} |"
        out.append(line)
    return "\n".join(out)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["models"] if r["baseline"]]
    kinds = [("train", "train step (fwd+bwd+AdamW)")]
    if any(r["gen_ratio"] is not None for r in rows):
        kinds.append(("gen", "beam-5 generation"))
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 0.6 * len(rows) + 2), sharey=True, squeeze=False)
    y = list(range(len(rows)))[::-1]
    for ax, (kind, title) in zip(axes[0], kinds):
        for yi, r in zip(y, rows):
            s, target = r[f"{kind}_ratio"], r[f"{kind}_target"]
            if s is None:
                ax.text(1.0, yi, "  not timed", va="center", fontsize=8, color="gray")
                continue
            color = "tab:gray" if target is None else ("tab:green" if s["median"] <= target else "tab:red")
            ax.barh(yi, s["median"] - 1, left=1, color=color,
                    xerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]], capsize=3)
            if target:
                ax.plot([target, target], [yi - 0.4, yi + 0.4], color="black", linestyle="--", linewidth=1)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(y, [f"{r['name']}\nvs {r['baseline']}" for r in rows])
        ax.set_xlabel(f"{'CPU-time' if report['clock'] == 'cpu' else 'wall-clock'} ratio vs baseline")
        ax.set_title(title)
    fig.suptitle(f"xlpe speed overhead — {report['machine']['device']}, {report['dtype']}, size {report['size']}, "
                 f"{report['date']}\nbars: median of {report['repeats']} interleaved repeats, whiskers: min–max, "
                 "dashed: target (green = met, red = missed, grey = no target)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
