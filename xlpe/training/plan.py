"""`xlpe-train` says what it will do and how long it will take, before and while it does it.

`RunPlan` prints, on the main process:

1. **the plan**, when training starts: steps, batching, the periodic evaluations (how many, on how many validation
   sentences, greedy or beam), and the final evaluation and test translation that follow;
2. **an estimate** once the first `measure_steps` steps are timed (seconds per step after a warm-up step), and
   **again after every periodic evaluation** (the mean step and evaluation times so far: a shared machine changes speed
   during a run): the wall time of the whole run on this machine, split into training, periodic evaluations, and final
   evaluation + test, with the share of each and what dominates. The final evaluation and the test are extrapolated from
   the measured periodic evaluation, per sentence, times `BEAM_COST` per extra beam (beam search costs more than greedy;
   the factor is stated). The first estimate, before any evaluation has run, times one greedy decode of a few
   validation sentences forced to their reference length (`decode_probe`), so it already counts the evaluations;
   an untrained model decodes to its length budget, so its first real evaluation would overstate the rest;
3. **the outcome** when training ends: the time it took against the last estimate of the training part.

`estimate_run` is the pure arithmetic (tested on its own); `plan_line` the plan's text.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from transformers import TrainerCallback

logger = logging.getLogger("xlpe.train")

# a sentence decoded with B beams costs 1 + BEAM_COST x (B - 1) times a greedy one; used only to extrapolate the
# final evaluation and the test from the mean periodic (greedy) evaluation. Measured on 2 CPU cores, recipe small,
# fr-en Multi30k: after the full 1,200 steps (10k pairs, 2026-11-27) the mean greedy evaluation cost 0.027 s a
# sentence and 4 beams (batched) 0.064 s on validation and 0.077-0.086 s on test, i.e. 2.4-3.2x (0.1 a beam had
# estimated the final part at 1.7 min; it took 3.8); after 60 steps (an untrained model, greedy decoding running to
# the length limit) 0.40 s greedy against 0.44-0.47 s with 4 beams, 1.1-1.2x. 0.5 a beam (4 beams: 2.5x) is right
# for a trained model and errs on the long side early in training
BEAM_COST = 0.5


def beam_factor(beams: int | None) -> float:
    return 1.0 + BEAM_COST * (max(int(beams or 1), 1) - 1)


def periodic_evaluations(start_step: int, max_steps: int, eval_steps: int | None, evaluating: bool) -> int:
    """How many periodic evaluations fall in steps (start_step, max_steps]: every `eval_steps` steps, and at the
    last step when it is not one of those (transformers' `DefaultFlowCallback` evaluates at the end of training)."""
    if not evaluating or not eval_steps or max_steps <= start_step:
        return 0
    return max_steps // eval_steps - start_step // eval_steps + (1 if max_steps % eval_steps else 0)


@dataclass
class RunShape:
    """What the run will do: steps left, periodic evaluations and their sentences and beams, the final
    evaluation's and the test's sentences and beams."""

    steps: int
    evaluations: int
    eval_sentences: int
    eval_beams: int
    final_sentences: int
    test_sentences: int
    final_beams: int
    test_passes: int = 1  # 2 for an XL PE model whose test split has oracle positions: predicted, then oracle


def estimate_run(
    shape: RunShape,
    seconds_per_step: float,
    seconds_per_evaluation: float | None,
    seconds_per_sentence: float | None = None,
) -> dict:
    """{part: seconds} of the run from the measured seconds per step and per periodic evaluation, with "total",
    "shares" ({part: share of total}) and "dominant". Before any evaluation has run (`seconds_per_evaluation`
    None), `seconds_per_sentence` (one greedy sentence of a timed decode,
    `ExtraInputsSeq2SeqTrainer.time_greedy_decoding`) stands in for it; without either, the evaluation parts are
    left out and "pending" says so."""
    parts = {"training": shape.steps * seconds_per_step}
    probed = seconds_per_evaluation is None and seconds_per_sentence is not None
    per_sentence = None  # one greedy sentence
    if probed:
        per_sentence = seconds_per_sentence
        if shape.eval_sentences:
            seconds_per_evaluation = per_sentence * shape.eval_sentences * beam_factor(shape.eval_beams)
    elif seconds_per_evaluation is not None:
        per_sentence = seconds_per_evaluation / max(shape.eval_sentences, 1) / beam_factor(shape.eval_beams)
    if seconds_per_evaluation is not None:
        parts["periodic evaluations"] = shape.evaluations * seconds_per_evaluation
    if per_sentence is not None:
        final = (
            per_sentence
            * beam_factor(shape.final_beams)
            * (shape.final_sentences + shape.test_sentences * shape.test_passes)
        )
        if final or seconds_per_evaluation is not None:  # (the probe alone: only when there is something to decode)
            parts["final evaluation + test"] = final
    pending = ""
    if probed and len(parts) > 1:
        pending = "evaluations estimated from a timed greedy decode at the reference length"
    elif not probed and seconds_per_evaluation is None and shape.evaluations:
        pending = "evaluations not measured yet"
    elif not probed and seconds_per_evaluation is None and (shape.final_sentences or shape.test_sentences):
        pending = "the final evaluation and the test not included: no periodic evaluation to time them from"
    return summarise(parts, pending)


def summarise(parts: dict, pending: str = "") -> dict:
    """{part: seconds} with "total", "shares" ({part: share of total}), "dominant" and "pending" (what the
    estimate leaves out, "" when nothing): the estimate `estimate_line` prints."""
    total = sum(parts.values())
    shares = {name: value / total if total else 0.0 for name, value in parts.items()}
    return {**parts, "total": total, "shares": shares, "dominant": max(parts, key=parts.get), "pending": pending}


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def plan_line(
    shape: RunShape,
    batching: str,
    eval_subset_of: int | None,
    early_stopping: bool = False,
    steps_per_epoch: float | None = None,
) -> str:
    """The plan in one paragraph (`early_stopping`: the steps are an upper bound; `steps_per_epoch`: optimizer
    steps in one pass over the training data, to say how many passes the steps make)."""
    sooner = "; early stopping may end the run sooner" if early_stopping else ""
    epochs = f" = {shape.steps / steps_per_epoch:.1f} epochs of {steps_per_epoch:,.0f} steps" if steps_per_epoch else ""
    text = f"plan: {'up to ' if early_stopping else ''}{shape.steps:,} training steps{epochs} ({batching}{sooner})"
    if shape.evaluations:
        of = f" of {eval_subset_of:,}" if eval_subset_of and eval_subset_of > shape.eval_sentences else ""
        decoding = "greedy" if shape.eval_beams <= 1 else f"{shape.eval_beams} beams"
        text += (
            f", {shape.evaluations} periodic evaluation{'s' if shape.evaluations != 1 else ''} on "
            f"{shape.eval_sentences:,}{of} validation sentences ({decoding})"
        )
    after = [
        f"the final evaluation on {shape.final_sentences:,} validation sentences" if shape.final_sentences else "",
        f"the test split's {shape.test_sentences:,} sentences"
        + (" (twice: predicted, then oracle positions)" if shape.test_passes > 1 else "")
        if shape.test_sentences
        else "",
    ]
    after = [part for part in after if part]
    if after:
        text += f"; then {' and '.join(after)} ({shape.final_beams} beams)"
    return text + "; time estimate after the first steps"


def estimate_line(estimate: dict, when: str) -> str:
    parts = ", ".join(
        f"{name} {_duration(estimate[name])} ({100 * estimate['shares'][name]:.0f}%)" for name in estimate["shares"]
    )
    measured = f" ({estimate['pending']})" if estimate.get("pending") else ""
    return (
        f"estimate {when}: {_duration(estimate['total'])} in all on this machine{measured}: {parts}; "
        f"{estimate['dominant']} dominates"
    )


class RunPlan(TrainerCallback):
    """Prints the plan, the estimates and the outcome (module docstring). Sizes come from `xlpe-train`'s run:
    validation sentences of the periodic evaluations (`eval_sentences`, of `validation_total`), of the final
    evaluation (`final_sentences`) and the test (`test_sentences`)."""

    def __init__(
        self,
        eval_sentences: int,
        validation_total: int,
        final_sentences: int,
        test_sentences: int,
        batching: str,
        final_beams: int = 1,
        measure_steps: int = 20,
        echo=print,
        test_passes: int = 1,
    ):
        self.sizes = (eval_sentences, validation_total, final_sentences, test_sentences)
        self.test_passes = test_passes
        self.final_beams = final_beams
        self.batching, self.measure_steps, self.echo = batching, measure_steps, echo
        self.command = "xlpe-train"
        self.decode_probe = None  # () -> seconds a greedy validation sentence, or None (set by xlpe-train)
        self.sentence_seconds: float | None = None
        self.shape: RunShape | None = None
        self.step_seconds = self.eval_seconds = None
        self.estimate: dict | None = None
        self._first_step = self._timed_from = self._last_step_end = self._train_start = None
        self._training_seconds, self._training = 0.0, False
        self._evaluation_seconds: list[float] = []

    def _say(self, state, text: str) -> None:
        if state.is_world_process_zero:
            self.echo(f"{self.command}: {text}", flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        eval_sentences, validation_total, final_sentences, test_sentences = self.sizes
        evaluating = getattr(args.eval_strategy, "value", args.eval_strategy) == "steps"
        self.shape = RunShape(
            steps=max(state.max_steps - state.global_step, 0),
            evaluations=periodic_evaluations(
                state.global_step, state.max_steps, args.eval_steps, evaluating and eval_sentences > 0
            ),
            eval_sentences=eval_sentences,
            eval_beams=int(args.generation_num_beams or 1),
            final_sentences=final_sentences,
            test_sentences=test_sentences,
            final_beams=int(self.final_beams or 1),
            test_passes=self.test_passes,
        )
        self._start_timing(state)
        stopping = bool(getattr(args, "early_stopping_patience", None) and self.shape.evaluations)
        try:  # batches in one pass over the data / accumulation = optimizer steps an epoch
            per_epoch = len(kwargs["train_dataloader"]) / max(int(args.gradient_accumulation_steps), 1)
        except (KeyError, TypeError):  # an iterable dataset: no length
            per_epoch = None
        self._say(state, plan_line(self.shape, self.batching, validation_total, stopping, per_epoch or None))

    def _start_timing(self, state) -> None:
        """Training starts now, at `state.global_step` (a resumed run counts from there)."""
        self._first_step, self._train_start = state.global_step, time.perf_counter()
        self._last_step_end, self._training = self._train_start, True

    def estimate_for(self, seconds_per_step: float, seconds_per_evaluation: float | None) -> dict:
        """The run's estimate from the times measured so far (`estimate_run` on this run's shape)."""
        return estimate_run(self.shape, seconds_per_step, seconds_per_evaluation, self.sentence_seconds)

    def _probe_decoding(self) -> None:
        """Times a greedy decode once, when some evaluation or test is still to come (`decode_probe`)."""
        shape = self.shape
        if self.decode_probe is None or not (shape.evaluations or shape.final_sentences or shape.test_sentences):
            return
        self.sentence_seconds = self.decode_probe()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        done = state.global_step - self._first_step
        if done == 1:  # the first step warms up (allocations, compilation): timed from its end
            self._timed_from, self._training_seconds = now, 0.0
        elif self._timed_from is not None:
            self._training_seconds += (
                now - self._last_step_end
            )  # (evaluations are left out: on_evaluate moves the mark)
            if self.step_seconds is None and done >= self.measure_steps:
                self.step_seconds = self._training_seconds / (done - 1)
                self._probe_decoding()
                now = time.perf_counter()  # (the probe's time is not a step's)
                self.estimate = self.estimate_for(self.step_seconds, None)
                self._say(state, estimate_line(self.estimate, f"after {done} steps ({self.step_seconds:.2f} s a step)"))
        self._last_step_end = now

    def on_evaluate(self, args, state, control, **kwargs):
        """Every periodic evaluation updates the estimate with the mean step and evaluation times so far (a machine
        shared with other work changes speed while the run goes on)."""
        if not self._training:  # the final evaluation, after training
            return
        seconds = time.perf_counter() - self._last_step_end
        self._evaluation_seconds.append(seconds)
        self.eval_seconds = sum(self._evaluation_seconds) / len(self._evaluation_seconds)
        done = state.global_step - self._first_step
        if self._timed_from is not None and done > 1:
            self.step_seconds = self._training_seconds / (done - 1)
        elif self.step_seconds is None:
            self.step_seconds = self._last_step_end - self._train_start
        self.estimate = self.estimate_for(self.step_seconds, self.eval_seconds)
        count = len(self._evaluation_seconds)
        self._say(
            state,
            estimate_line(
                self.estimate,
                f"at step {state.global_step}, after evaluation {count} of "
                f"{self.shape.evaluations} ({seconds:.0f} s; "
                f"{self.step_seconds:.2f} s a step so far)",
            ),
        )
        self._last_step_end = time.perf_counter()  # (the next step is timed from here)

    def on_train_end(self, args, state, control, **kwargs):
        if not self._training:
            return
        self._training = False
        took = time.perf_counter() - self._train_start
        evaluations = sum(self._evaluation_seconds)
        text = f"training took {_duration(took)}"
        if self._evaluation_seconds and took:
            text += (
                f", {len(self._evaluation_seconds)} periodic evaluations "
                f"{_duration(evaluations)} of it ({100 * evaluations / took:.0f}%)"
            )
        if self.estimate is not None:
            planned = self.estimate["training"] + self.estimate.get("periodic evaluations", 0.0)
            text += f"; estimated {_duration(planned)} for that part"
        self._say(state, text)


# ----------------------------------------------------------------------------------------------------------
# xlpe-reorder train: training steps, then the order-prior calibration
# ----------------------------------------------------------------------------------------------------------


def reorderer_plan_line(steps: int, epochs: float, batch_size: int, pairs: int, calibration_pairs: int) -> str:
    """The standalone reorderer's plan in one paragraph."""
    text = f"plan: {steps:,} training steps ({epochs:g} epochs over {pairs:,} pairs, {batch_size} sentences a step)"
    if calibration_pairs:
        text += f"; then the order-prior calibration on {calibration_pairs:,} held-out pairs"
    return text + "; time estimate after the first steps"


class ReordererPlan(RunPlan):
    """`xlpe-reorder train`'s plan, estimates and outcome: the training steps (timed as in `RunPlan`: after a
    warm-up step, from the first `measure_steps`), then the order-prior calibration, whose cost is measured before
    training on a sample of the held-out pairs (`calibration_seconds`, scaled to all of them; None: no
    calibration). The reorderer trains without periodic evaluations."""

    def __init__(
        self,
        pairs: int,
        batch_size: int,
        calibration_pairs: int = 0,
        calibration_seconds: float | None = None,
        measure_steps: int = 20,
        echo=print,
    ):
        super().__init__(0, 0, 0, 0, f"{batch_size} sentences a step", measure_steps=measure_steps, echo=echo)
        self.command = "xlpe-reorder train"
        self.pairs, self.batch_size = pairs, batch_size
        self.calibration_pairs, self.calibration_seconds = calibration_pairs, calibration_seconds

    def on_train_begin(self, args, state, control, **kwargs):
        self.shape = RunShape(
            steps=max(state.max_steps - state.global_step, 0),
            evaluations=0,
            eval_sentences=0,
            eval_beams=1,
            final_sentences=0,
            test_sentences=0,
            final_beams=1,
        )
        self._start_timing(state)
        epochs = float(args.num_train_epochs)
        plan = reorderer_plan_line(self.shape.steps, epochs, self.batch_size, self.pairs, self.calibration_pairs)
        self._say(state, plan)

    def estimate_for(self, seconds_per_step: float, seconds_per_evaluation: float | None) -> dict:
        parts = {"training": self.shape.steps * seconds_per_step}
        if self.calibration_seconds is not None:
            parts["order-prior calibration"] = self.calibration_seconds
        return summarise(parts)


__all__ = [
    "BEAM_COST",
    "ReordererPlan",
    "RunPlan",
    "RunShape",
    "beam_factor",
    "estimate_line",
    "estimate_run",
    "periodic_evaluations",
    "plan_line",
    "reorderer_plan_line",
]
