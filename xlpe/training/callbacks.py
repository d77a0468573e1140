"""Trainer callbacks of `xlpe-train`: early stopping on validation BLEU, and the epoch of the token-batch sampler.

* `ValidationEarlyStopping` is transformers' `EarlyStoppingCallback` (its state is saved in checkpoints and
  restored on resume) without the requirement to load the best checkpoint at the end: here the final model
  is the average of the last checkpoints (`--average_last_checkpoints`) or the last one.
* `TokenBatchEpoch` tells `TokenBatchSampler` which epoch starts. accelerate's `set_epoch` does not reach a
  batch sampler wrapped twice (a resumed multi-process run: `SkipBatchSampler(BatchSamplerShard(...))`), and
  a resumed run must draw the same batches as the interrupted one.
"""

from __future__ import annotations

import logging
import math

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
