"""Trainer callbacks of `xlpe-train`: early stopping on validation BLEU, and the epoch of the token-batch sampler.

* `ValidationEarlyStopping` is transformers' `EarlyStoppingCallback` (its state is saved in checkpoints and
  restored on resume) without the requirement to load the best checkpoint at the end: here the final model
  is the average of the last checkpoints (`--average_last_checkpoints`) or the last one.
* `RunClock` sums the wall time of training over resumed segments (recorded in every checkpoint), for the card.
* `RunOutcome` prints, when training ends, what ended it (early stopping, `--max_steps`, the epochs) and what
  the validation metric did (first, best, last: `describe_run_end`).
* `Throughput` measures the training time between log lines (evaluation and checkpointing left out) and turns
  the trainer's token counts into `target_tokens_per_second` and, on a GPU of known peak, `mfu` (model FLOPs
  utilisation) in every training log line, and `train_target_tokens_per_second` / `train_mfu` at the end.
* `TokenBatchEpoch` tells `TokenBatchSampler` which epoch starts. accelerate's `set_epoch` does not reach a
  batch sampler wrapped twice (a resumed multi-process run: `SkipBatchSampler(BatchSamplerShard(...))`), and
  a resumed run must draw the same batches as the interrupted one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from transformers import EarlyStoppingCallback, TrainerCallback

logger = logging.getLogger("xlpe.train")


class ValidationEarlyStopping(EarlyStoppingCallback):
    """Stop when `metric_for_best_model` (BLEU by default) has not improved for `patience` evaluations.
    `stopped_at` is the step at which *this* callback stopped the run (None when something else ended it:
    `--max_steps`, the epochs), so the end-of-run message (`RunOutcome`) says what really happened."""

    stopped_at: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if args.metric_for_best_model is None or args.eval_strategy == "no":
            raise ValueError(
                f"--early_stopping_patience {self.early_stopping_patience} needs periodic evaluation "
                f"(--eval_strategy steps) and --metric_for_best_model; got --eval_strategy "
                f"{getattr(args.eval_strategy, 'value', args.eval_strategy)}, --metric_for_best_model "
                f"{args.metric_for_best_model}"
            )
        logger.info(
            "early stopping: after %d evaluations without a better eval_%s",
            self.early_stopping_patience,
            args.metric_for_best_model.removeprefix("eval_"),
        )

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        super().on_evaluate(args, state, control, metrics, **kwargs)
        # (control.should_training_stop is also set by the last step of --max_steps: only the counter says that
        # the metric stopped improving)
        if self.early_stopping_patience_counter >= self.early_stopping_patience and self.stopped_at is None:
            self.stopped_at = state.global_step
            logger.warning(
                "early stopping at step %d: eval_%s has not improved on %s for %d evaluations",
                state.global_step,
                args.metric_for_best_model.removeprefix("eval_"),
                state.best_metric,
                self.early_stopping_patience,
            )


def describe_run_end(
    step: int,
    max_steps: int,
    history: list[tuple[int, float]],
    metric: str | None,
    early_stopped_at: int | None,
    patience: int | None = None,
    greater_is_better: bool = True,
) -> str:
    """One sentence saying why training ended and what the validation metric did: early stopping (and on which
    best value), or the step/epoch budget, with the metric's first, best and last values (`history`: (step, value)
    of every periodic evaluation). Pure: `RunOutcome` prints it."""
    if early_stopped_at is not None:
        reason = f"early stopping: eval_{metric} did not improve for {patience} evaluations"
    elif max_steps > 0 and step >= max_steps:
        reason = f"--max_steps {max_steps} reached"
    else:
        reason = "the last epoch (--num_train_epochs) done"
    text = f"training ended at step {step}: {reason}"
    if history and metric:
        (first_step, first), (last_step, last) = history[0], history[-1]
        best_step, best = (max if greater_is_better else min)(history, key=lambda item: item[1])
        count = f"{len(history)} evaluation{'s' if len(history) != 1 else ''}"
        if last == first:
            text += f"; eval_{metric} stayed at {last:g} from step {first_step} to step {last_step} over {count}"
        else:
            moved = "rose" if last > first else "fell"
            text += (
                f"; eval_{metric} {moved} from {first:g} (step {first_step}) to {last:g} (step {last_step}) over "
                f"{count}"
            )
        text += f", best {best:g} at step {best_step}"
        if early_stopped_at is None and best_step == last_step and len(history) > 1:
            text += " (still improving: more steps may help)"
    return text


class RunOutcome(TrainerCallback):
    """Prints, when training ends, why it ended (`describe_run_end`) with the validation metric of every periodic
    evaluation (from the trainer's log history, so a resumed run counts the evaluations before the resume too):
    never "early stopping" for a run that `--max_steps` ended."""

    def __init__(self, early_stopping: ValidationEarlyStopping | None = None):
        self.early_stopping = early_stopping

    @staticmethod
    def history(log_history: list[dict], metric: str) -> list[tuple[int, float]]:
        """(step, value) of `eval_<metric>` in a trainer log history, one per step, in step order."""
        values = {
            entry["step"]: float(entry[f"eval_{metric}"])
            for entry in log_history
            if isinstance(entry.get(f"eval_{metric}"), (int, float)) and "step" in entry
        }
        return sorted(values.items())

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        metric = (args.metric_for_best_model or "").removeprefix("eval_") or None
        stopper = self.early_stopping
        print(
            "xlpe-train: "
            + describe_run_end(
                state.global_step,
                args.max_steps,
                self.history(state.log_history, metric) if metric else [],
                metric,
                stopper.stopped_at if stopper else None,
                stopper.early_stopping_patience if stopper else None,
                args.greater_is_better is not False,
            ),
            flush=True,
        )


class RunClock(TrainerCallback):
    """Wall time of training summed over resumed segments: every checkpoint records (`xlpe_elapsed.json`) the
    seconds trained up to it and the segment count; a run resumed from it starts from those. The time between
    the last checkpoint and a kill is not counted (those steps were trained again). `total()`: (seconds, segments)."""

    FILE = "xlpe_elapsed.json"

    def __init__(self, resumed_from: str | None = None):
        import json
        from pathlib import Path

        self.base, self.segments = 0.0, 1
        recorded = Path(resumed_from) / self.FILE if resumed_from else None
        if recorded is not None and recorded.is_file():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                data = json.loads(recorded.read_text(encoding="utf-8"))
                self.base, self.segments = float(data["seconds"]), int(data["segments"]) + 1
        elif resumed_from:
            self.segments = 2  # resumed from a checkpoint without the record: the earlier time is unknown
        self.unknown_before = bool(resumed_from) and not (recorded is not None and recorded.is_file())
        self.started = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return self.base + (time.perf_counter() - self.started if self.started is not None else 0.0)

    def on_save(self, args, state, control, **kwargs):
        import json
        from pathlib import Path

        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / self.FILE).write_text(
                json.dumps({"seconds": round(self.seconds(), 2), "segments": self.segments})
            )

    def total(self) -> tuple[float, int]:
        return self.seconds(), self.segments


class TokenBatchEpoch(TrainerCallback):
    """Sets the epoch of the trainer's `TokenBatchSampler` at every epoch start, from the global step (the
    Trainer's own formula: steps per epoch = ceil(batches / gradient accumulation))."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler = getattr(self.trainer, "token_sampler", None)
        if sampler is not None:
            steps_per_epoch = max(math.ceil(len(sampler) / args.gradient_accumulation_steps), 1)
            sampler.set_epoch(state.global_step // steps_per_epoch)


# ---------------------------------------------------------------------------------------------------------
# Throughput: target tokens/s and model FLOPs utilisation
# ---------------------------------------------------------------------------------------------------------

# Dense (no sparsity) peak of one whole GPU in TFLOP/s by math mode, from the vendor's data sheets, keyed by the
# exact canonical name `canonical_gpu_name` makes of `torch.cuda.get_device_name()` ("NVIDIA L40" is the L40, never
# the L4); with the part's full SM count, against which a MIG slice (fewer SMs) is scaled. Math modes: "bfloat16"
# and "float16" (tensor cores), "tf32" (fp32 matmuls on tensor cores: `--tf32 True` /
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
        return None, f"{device_name or 'no GPU'} is not in callbacks.GPU_PEAKS"
    peaks = GPU_PEAKS[part]
    peak = peaks[dtype]
    if peak is None:
        return None, f"no dense {dtype} peak of the {part} in callbacks.GPU_PEAKS"
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


class Throughput(TrainerCallback):
    """Training time and throughput. The clock runs from the start of training; evaluation and checkpointing
    are left out (time from the last optimizer step to the end of an evaluation or a save is not counted). At
    each training log line `interval(source_tokens, target_tokens)` (the trainer's counts of real, non-pad tokens
    over all processes since the last line) gives `target_tokens_per_second` and, when the GPU's peak is known,
    `mfu` = model FLOPs (`train_flops_per_token`) / seconds / (peak x processes). Host clock; the loss logged at
    each line synchronises the device, so intervals are exact up to the steps still queued at an evaluation.
    On CPU (or an unknown GPU) MFU is omitted, not zero."""

    def __init__(self, config=None, peak: float | None = None):
        self.flops = train_flops_per_token(config) if config is not None else None
        self.peak = peak  # TFLOP/s of one device; None: looked up at on_train_begin
        self.peak_source = "given" if peak else None  # what the peak is (`device_peak`), or why there is none
        self.world_size = 1
        self._mark = self._last_step_end = None
        self._interval = self._total = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        import torch

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
