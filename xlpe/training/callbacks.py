"""Trainer callbacks of `xlpe-train`: early stopping on validation BLEU, and the epoch of the token-batch sampler.

* `ValidationEarlyStopping` is transformers' `EarlyStoppingCallback` (its state is saved in checkpoints and
  restored on resume) without the requirement to load the best checkpoint at the end: here the final model
  is the average of the last checkpoints (`--average_last_checkpoints`) or the last one.
* `Throughput` measures the training time between log lines (evaluation and checkpointing left out) and turns
  the trainer's token counts into `target_tokens_per_second` and, on a GPU of known peak, `mfu` (model FLOPs
  utilisation) in every training log line, and `train_target_tokens_per_second` / `train_mfu` at the end.
* `TokenBatchEpoch` tells `TokenBatchSampler` which epoch starts. accelerate's `set_epoch` does not reach a
  batch sampler wrapped twice (a resumed multi-process run: `SkipBatchSampler(BatchSamplerShard(...))`), and
  a resumed run must draw the same batches as the interrupted one.
"""

from __future__ import annotations

import logging
import math
import time

from transformers import EarlyStoppingCallback, TrainerCallback

logger = logging.getLogger("xlpe.train")


class ValidationEarlyStopping(EarlyStoppingCallback):
    """Stop when `metric_for_best_model` (BLEU by default) has not improved for `patience` evaluations."""

    def on_train_begin(self, args, state, control, **kwargs):
        if args.metric_for_best_model is None or args.eval_strategy == "no":
            raise ValueError(f"--early_stopping_patience {self.early_stopping_patience} needs periodic evaluation "
                             f"(--eval_strategy steps) and --metric_for_best_model; got --eval_strategy "
                             f"{getattr(args.eval_strategy, 'value', args.eval_strategy)}, --metric_for_best_model "
                             f"{args.metric_for_best_model}")  # fmt: skip
        logger.info("early stopping: after %d evaluations without a better eval_%s", self.early_stopping_patience,
                    args.metric_for_best_model.removeprefix("eval_"))  # fmt: skip

    def on_evaluate(self, args, state, control, metrics, **kwargs):
        super().on_evaluate(args, state, control, metrics, **kwargs)
        if control.should_training_stop:
            logger.warning("early stopping at step %d: eval_%s has not improved on %s for %d evaluations", state.global_step,
                        args.metric_for_best_model.removeprefix("eval_"), state.best_metric, self.early_stopping_patience)  # fmt: skip


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
# Throughput: target tokens/s and model FLOPs utilisation (issue 21)
# ---------------------------------------------------------------------------------------------------------

# Dense (no sparsity) bf16 tensor-core peak of one GPU in TFLOP/s, from the vendor's data sheets; matched against
# `torch.cuda.get_device_name()` in this order (first substring found wins: "H100 PCIe" before "H100").
PEAK_DENSE_BF16_TFLOPS = (
    ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.0), ("H200", 989.0), ("H100", 989.0),  # H100 SXM
    ("H800", 989.0), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0), ("L4", 121.0),
    ("A10", 125.0),
)  # fmt: skip


def peak_tflops(device_name: str | None) -> float | None:
    """Dense bf16 peak (TFLOP/s) of the GPU called `device_name` (None: unknown device, or not a GPU)."""
    for key, value in PEAK_DENSE_BF16_TFLOPS:
        if device_name and key.lower() in device_name.lower():
            return value
    return None


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
        dec_layers, enc_ffn, dec_ffn = int(config.decoder_layers), int(config.encoder_ffn_dim), int(config.decoder_ffn_dim)
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
        self.world_size = 1
        self._mark = self._last_step_end = None
        self._interval = self._total = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        import torch

        if self.peak is None and args.device.type == "cuda":
            self.peak = peak_tflops(torch.cuda.get_device_name(args.device))
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
            metrics["train_mfu_peak_tflops"] = self.peak * self.world_size  # the dense bf16 figure MFU divides by
        if metrics and self._total:
            metrics["train_seconds_training"] = round(self._total, 2)
        return metrics
