"""Trainer callbacks of `xlpe-train`: early stopping on validation BLEU, the run's clock and outcome line, and the
epoch of the token-batch sampler (the training report, padding and throughput, is `throughput.TrainingReport`).

* `ValidationEarlyStopping` is transformers' `EarlyStoppingCallback` (its state is saved in checkpoints and
  restored on resume) without the requirement to load the best checkpoint at the end: here the final model
  is the average of the last checkpoints (`--average_last_checkpoints`) or the last one.
* `RunClock` sums the wall time of training over resumed segments (recorded in every checkpoint), for the card.
* `RunOutcome` prints, when training ends, what ended it (early stopping, `--max_steps`, the epochs) and what
  the validation metric did (first, best, last: `describe_run_end`).
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
