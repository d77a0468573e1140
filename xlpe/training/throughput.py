"""The training report: padding trained on, throughput and model FLOPs utilisation (MFU), as a `TrainerCallback`.

`TrainingReport` (one per trainer, `ExtraInputsSeq2SeqTrainer.report`):

* **Padding.** `count_batch` adds each training batch's real (non-pad) and padded tokens, source and target; the
  counts stay on the device (no host-device copy or sync per step). Training log lines get `padding_waste`
  (share of pad tokens since the last line); the final metrics `train_padding_waste`, `train_real_tokens`,
  `train_target_tokens` and `train_tokens_per_second` (real tokens of both sides over `train_runtime`).
* **Throughput.** The clock runs over training only (evaluation and checkpointing left out: `on_evaluate`,
  `on_save`); log lines get `target_tokens_per_second` and, on a GPU of known peak, `mfu`; the final metrics
  `train_target_tokens_per_second`, `train_seconds_training` and `train_mfu` (with the peak it divides by).
* **MFU** = model FLOPs (`train_flops_per_token` x real tokens) / seconds / (peak x processes); the peak is the
  device's dense figure for the run's math mode (`device_peak`, table `GPU_PEAKS`). On CPU or an unknown GPU
  MFU is omitted, not zero. docs/training.md explains the estimate.

The values join a log line in `ExtraInputsSeq2SeqTrainer.log` (`log_values`): `on_log` runs after the line is
recorded in `state.log_history` and after the reporting integrations have seen it.
"""

from __future__ import annotations

import logging
import time

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback

logger = logging.getLogger("xlpe.train")

# ---------------------------------------------------------------------------------------------------------
# The GPU peaks MFU divides by
# ---------------------------------------------------------------------------------------------------------

# Dense peak of one whole GPU in TFLOP/s by math mode, from NVIDIA's data sheets (the specifications on each part's
# nvidia.com data-center page: H100, H200, GH200, A100, B200, L40S, L40, L4, A10; their tensor-core figures "with
# sparsity" halved; H800/A800, the export versions of H100/A100, have the same compute figures). Keyed by the exact
# canonical name `canonical_gpu_name` makes of `torch.cuda.get_device_name()` ("NVIDIA L40" is the L40, never the
# L4); `sms`: the part's full SM count, against which a MIG slice (fewer SMs) is scaled. Math modes: "bfloat16" and
# "float16" (tensor cores), "tf32" (fp32 matmuls on tensor cores: `--tf32 True` /
# `torch.backends.cuda.matmul.allow_tf32`), "float32" (CUDA cores). None: the data sheet gives no figure.
GPU_PEAKS: dict[str, dict] = {
    "H100 SXM": dict(bfloat16=989.4, float16=989.4, tf32=494.7, float32=66.9, sms=132),
    "H100 PCIe": dict(bfloat16=756.0, float16=756.0, tf32=378.0, float32=51.2, sms=114),
    "H100 NVL": dict(bfloat16=835.0, float16=835.0, tf32=417.5, float32=60.0, sms=132),
    "H200 SXM": dict(bfloat16=989.4, float16=989.4, tf32=494.7, float32=66.9, sms=132),
    "H200 NVL": dict(bfloat16=835.0, float16=835.0, tf32=417.5, float32=60.0, sms=132),
    "GH200": dict(bfloat16=989.4, float16=989.4, tf32=494.7, float32=66.9, sms=132),
    "H800 SXM": dict(bfloat16=989.4, float16=989.4, tf32=494.7, float32=66.9, sms=132),
    "H800 PCIe": dict(bfloat16=756.0, float16=756.0, tf32=378.0, float32=51.2, sms=114),
    "A100 SXM": dict(bfloat16=312.0, float16=312.0, tf32=156.0, float32=19.5, sms=108),
    "A100 PCIe": dict(bfloat16=312.0, float16=312.0, tf32=156.0, float32=19.5, sms=108),
    "A800 SXM": dict(bfloat16=312.0, float16=312.0, tf32=156.0, float32=19.5, sms=108),
    "A800 PCIe": dict(bfloat16=312.0, float16=312.0, tf32=156.0, float32=19.5, sms=108),
    "B200": dict(bfloat16=2250.0, float16=2250.0, tf32=1100.0, float32=None, sms=148),
    "L40S": dict(bfloat16=362.0, float16=362.0, tf32=183.0, float32=91.6, sms=142),
    "L40": dict(bfloat16=181.0, float16=181.0, tf32=90.5, float32=90.5, sms=142),
    "L4": dict(bfloat16=121.0, float16=121.0, tf32=60.0, float32=30.3, sms=58),
    "A10": dict(bfloat16=125.0, float16=125.0, tf32=62.5, float32=31.2, sms=72),
}
# the dense bf16 column alone (the figure `xlpe-train` divides by in a bf16 run)
PEAK_DENSE_BF16_TFLOPS: dict[str, float] = {name: peaks["bfloat16"] for name, peaks in GPU_PEAKS.items()}
MATH_MODES = ("bfloat16", "float16", "tf32", "float32")
# parts sold in SXM and PCIe (or NVL) boards under one model number; any other model is its own entry
_BOARD_VARIANTS = {"H100": "SXM", "H200": "SXM", "H800": "SXM", "A100": "SXM", "A800": "SXM"}


def canonical_gpu_name(device_name: str | None) -> str | None:
    """The `GPU_PEAKS` key of a device name as CUDA reports it (None: not a part in the table). The model is the
    first word after the vendor ("NVIDIA", "Tesla"), matched exactly, so "L40" is not "L4" nor "A10G" "A10";
    memory sizes ("80GB"), memory kinds ("HBM3") and a MIG profile ("MIG 1g.10gb") are ignored; for parts
    sold as several boards the board ("PCIe", "NVL"; otherwise SXM) is read from the rest of the name.
    E.g. "NVIDIA H100 80GB HBM3" -> "H100 SXM", "NVIDIA A100-PCIE-40GB" -> "A100 PCIe", "NVIDIA L40" -> "L40"."""
    if not device_name:
        return None
    words = device_name.upper().replace("-", " ").replace("_", " ").split()
    while words and words[0] in ("NVIDIA", "TESLA", "GEFORCE", "QUADRO"):
        words = words[1:]
    if "MIG" in words:
        words = words[: words.index("MIG")]
    if not words:
        return None
    model, rest = words[0], set(words[1:])
    if model in _BOARD_VARIANTS:
        board = "PCIe" if "PCIE" in rest else "NVL" if "NVL" in rest else _BOARD_VARIANTS[model]
        name = f"{model} {board}"
    else:
        name = model
    return name if name in GPU_PEAKS else None


def math_mode(bf16: bool = False, fp16: bool = False, tf32: bool | None = None) -> str:
    """The math mode a training run's matmuls take: bf16/fp16 autocast, else tf32 when fp32 matmuls may use
    tensor cores (`tf32`; None: read torch's current setting), else float32."""
    if bf16:
        return "bfloat16"
    if fp16:
        return "float16"
    if tf32 is None:
        import torch

        tf32 = bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
    return "tf32" if tf32 else "float32"


def device_peak(
    device_name: str | None, dtype: str = "bfloat16", multi_processor_count: int | None = None
) -> tuple[float | None, str]:
    """(peak TFLOP/s, what it is) of the device called `device_name` for matmuls in `dtype` (a `MATH_MODES`
    entry), or (None, why there is none). A MIG slice (the name says "MIG", or `multi_processor_count` is below
    the part's full SM count) gets the part's peak scaled by its share of the SMs; a slice whose SM count is
    not given has no peak. Raises ValueError for an unknown `dtype`."""
    if dtype not in MATH_MODES:
        raise ValueError(f"math mode {dtype!r} is not one of {list(MATH_MODES)}")
    part = canonical_gpu_name(device_name)
    if part is None:
        return None, f"{device_name or 'no GPU'} is not in throughput.GPU_PEAKS"
    peaks = GPU_PEAKS[part]
    peak = peaks[dtype]
    if peak is None:
        return None, f"no dense {dtype} peak of the {part} in throughput.GPU_PEAKS"
    full = peaks["sms"]
    mig = "MIG" in device_name.upper().replace("-", " ").split()
    if multi_processor_count is not None and multi_processor_count < full:
        share = multi_processor_count / full
        return round(
            peak * share, 1
        ), f"dense {dtype} peak of the {part} ({peak:g}) x {multi_processor_count}/{full} SMs (a MIG slice)"
    if mig:
        return None, f"{device_name} is a MIG slice and its SM count is unknown"
    return peak, f"dense {dtype} peak of the {part}"


def peak_tflops(
    device_name: str | None, dtype: str = "bfloat16", multi_processor_count: int | None = None
) -> float | None:
    """Dense peak (TFLOP/s) of the GPU called `device_name` in math mode `dtype` (None: unknown device, not a
    GPU, a MIG slice of unknown size, or no figure for that mode). `device_peak` says why."""
    return device_peak(device_name, dtype, multi_processor_count)[0]


def train_flops_per_token(config) -> tuple[float, float] | None:
    """(FLOPs per source token, FLOPs per target token) of one training step (forward + backward) of the
    encoder-decoder Transformer described by `config` (Marian/BART field names), Kaplan/PaLM-style: 6 x the
    multiply-accumulates of the weight matrices each token passes through (2 FLOPs per MAC, backward = 2 x
    forward). A source token passes the encoder layers (Q, K, V, O: 4 d^2; FFN: 2 d f; a DPE block's
    `dpe_layers` count as encoder layers) and every decoder layer's cross-attention K/V (2 d^2); a target token
    passes the decoder layers (self-attention 4 d^2, cross-attention Q/O 2 d^2, FFN 2 d f) and the output
    projection (d x vocab). Not counted: attention scores and values (2 d x length per token and layer, 1-3 % at
    sentence lengths of 20-50 tokens), embeddings, norms, and auxiliary modules (XL PE's reorder predictor).
    None when the config lacks these fields."""
    try:
        d, vocab = int(config.d_model), int(config.vocab_size)
        enc_layers = int(config.encoder_layers) + int(getattr(config, "dpe_layers", 0) or 0)
        dec_layers, enc_ffn, dec_ffn = (
            int(config.decoder_layers),
            int(config.encoder_ffn_dim),
            int(config.decoder_ffn_dim),
        )
    except (AttributeError, TypeError, ValueError):
        return None
    source = enc_layers * (4 * d * d + 2 * d * enc_ffn) + dec_layers * 2 * d * d
    target = dec_layers * (6 * d * d + 2 * d * dec_ffn) + d * vocab
    return 6.0 * source, 6.0 * target


class TrainingReport(TrainerCallback):
    """Padding and throughput of a training run (module docstring). The clock runs from the start of training;
    time from the last optimizer step to the end of an evaluation or a save is not counted. Host clock; the loss
    logged at each line synchronises the device, so intervals are exact up to the steps still queued at an
    evaluation. `config`: the model's (for the FLOPs per token); `peak`: TFLOP/s of one device (None: looked up
    at `on_train_begin` on a GPU)."""

    def __init__(self, config=None, peak: float | None = None):
        self.flops = train_flops_per_token(config) if config is not None else None
        self.peak = peak  # TFLOP/s of one device; None: looked up at on_train_begin
        self.peak_source = "given" if peak else None  # what the peak is (`device_peak`), or why there is none
        self.world_size = 1
        self._mark = self._last_step_end = None
        self._interval = self._total = 0.0
        self._padding = {"interval": None, "total": None}  # ((real, real target) tokens on device, padded: int)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.peak is None and args.device.type == "cuda":
            properties = torch.cuda.get_device_properties(args.device)
            mode = math_mode(
                bool(getattr(args, "bf16", False)), bool(getattr(args, "fp16", False)), getattr(args, "tf32", None)
            )
            self.peak, self.peak_source = device_peak(properties.name, mode, properties.multi_processor_count)
            if self.peak is None:
                logger.info("MFU not reported: %s", self.peak_source)
        self.world_size = max(int(args.world_size), 1)
        self._mark = self._last_step_end = time.perf_counter()
        self._interval = self._total = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        self._last_step_end = time.perf_counter()

    def _bank(self, until: float) -> None:
        if self._mark is not None:
            span = max(until - self._mark, 0.0)
            self._interval += span
            self._total += span

    def _pause(self) -> None:  # an evaluation or a save just ended: count up to the last step, restart now
        if self._mark is None:  # not training (an evaluation after training)
            return
        self._bank(self._last_step_end if self._last_step_end is not None else time.perf_counter())
        self._mark = time.perf_counter()

    def on_evaluate(self, args, state, control, **kwargs):
        self._pause()

    def on_save(self, args, state, control, **kwargs):
        self._pause()

    def on_train_end(self, args, state, control, **kwargs):
        self._pause()
        self._mark = None

    def rates(self, source_tokens: float, target_tokens: float, seconds: float, prefix: str = "") -> dict:
        if seconds <= 0:
            return {}
        rates = {f"{prefix}target_tokens_per_second": round(target_tokens / seconds, 1)}
        if self.flops is not None and self.peak:
            flops = self.flops[0] * source_tokens + self.flops[1] * target_tokens
            rates[f"{prefix}mfu"] = round(flops / seconds / (self.peak * 1e12 * self.world_size), 4)
        return rates

    def interval(self, source_tokens: float, target_tokens: float) -> dict:
        """Throughput since the last call (a training log line)."""
        if self._mark is None:  # not training
            return {}
        now = time.perf_counter()
        self._bank(now)
        self._mark, seconds, self._interval = now, self._interval, 0.0
        return self.rates(source_tokens, target_tokens, seconds)

    def totals(self, source_tokens: float, target_tokens: float, fallback_seconds: float | None = None) -> dict:
        """`train_target_tokens_per_second` and `train_mfu` over the whole training (training time only)."""
        if self._mark is not None:  # still running: count up to now
            self._bank(time.perf_counter())
            self._mark = time.perf_counter()
        seconds = self._total or fallback_seconds or 0.0
        metrics = self.rates(source_tokens, target_tokens, seconds, prefix="train_")
        if "train_mfu" in metrics:
            metrics["train_mfu_peak_tflops"] = self.peak * self.world_size  # the dense figure MFU divides by
            metrics["train_mfu_peak"] = self.peak_source  # which figure: part, math mode, MIG share
        if metrics and self._total:
            metrics["train_seconds_training"] = round(self._total, 2)
        return metrics

    # --- padding ------------------------------------------------------------------------------------------
    def count_batch(self, inputs: dict) -> None:
        """Adds the real and the padded tokens of a training batch (source and target) to the counters."""
        real, padded, target = None, 0, None
        for key, is_real in (("attention_mask", lambda x: x != 0), ("labels", lambda x: x != -100)):
            value = inputs.get(key)
            if isinstance(value, torch.Tensor):
                count = is_real(value).sum()
                real = count if real is None else real + count
                padded += value.numel()
                target = count if key == "labels" else target
        if real is None:
            return
        target = target if target is not None else real * 0
        # real and target tokens stay on the device (no sync); the padded count is known on the host (shapes): it
        # stays a Python int, since a tensor made from it would be a blocking host-to-device copy every step
        counts = torch.stack([real.double(), target.double()])  # built once, added twice
        for bucket in ("interval", "total"):
            previous = self._padding[bucket]
            self._padding[bucket] = (
                (counts, padded) if previous is None else (previous[0] + counts, previous[1] + padded)
            )

    def pop_padding(self, bucket: str) -> tuple[float, float, float]:
        """(real, padded, real target) tokens since the last call (`bucket`: "interval" or "total"), summed over
        processes."""
        counts, self._padding[bucket] = self._padding[bucket], None
        real, padded, target = 0.0, 0.0, 0.0
        if counts is not None:  # (real, target) on the device, padded on the host
            (real, target), padded = counts[0].tolist(), float(counts[1])
        if self.world_size > 1:  # every process reaches this point together (a log line, the end of training)
            gathered = gather_object([(real, padded, target)])
            real, padded, target = (sum(g[k] for g in gathered) for k in range(3))
        return real, padded, target

    # --- what the trainer reports -------------------------------------------------------------------------
    def log_values(self) -> dict[str, float]:
        """`padding_waste`, `target_tokens_per_second` and (GPU of known peak) `mfu` since the last training log
        line."""
        real, padded, target = self.pop_padding("interval")
        values = {"padding_waste": round(1 - real / padded, 4)} if padded else {}
        values.update(self.interval(real - target, target))
        return values

    def train_metrics(self, train_runtime: float | None = None, token_sampler=None) -> dict[str, float]:
        """`train_padding_waste` (share of pad tokens in the trained batches), `train_real_tokens` and, given
        the runtime, `train_tokens_per_second` (real tokens, both sides, all processes); `train_target_tokens`,
        `train_target_tokens_per_second` and (GPU of known peak) `train_mfu` over the training time alone;
        given the `--max_tokens` sampler, `train_token_batches_per_epoch` (all processes' batches)."""
        real, padded, target = self.pop_padding("total")
        metrics = {
            "train_padding_waste": round(1 - real / padded, 4) if padded else 0.0,
            "train_real_tokens": int(real),
            "train_target_tokens": int(target),
        }
        if train_runtime:
            metrics["train_tokens_per_second"] = round(real / train_runtime, 1)
        metrics.update(self.totals(real - target, target, train_runtime))  # training time only
        if token_sampler is not None:
            metrics["train_token_batches_per_epoch"] = len(token_sampler.sizes)
        return metrics
