"""The learning check of `xlpe-train`: after each periodic evaluation, is the model learning to translate?

A run on data its recipe does not fit (too few pairs for a model trained from scratch, sentences much longer than
the recipe's steps can cover) trains for an hour and ends with output like "It is not to be able to be able to be
able to ...". Nothing fails, so nothing would say so. This check reads the validation metrics the evaluations log
(`state.log_history`, so a resumed run sees the evaluations before the resume) and reports, in one line each time
its verdict changes, what is wrong and what to try. The verdict goes to `output_dir/learning_check.json`, which the
model card reads (a card of a model that did not learn says so at the top).

The checks (from the second evaluation on, and only once the learning-rate warm-up is over, when the model can
have learnt something; each threshold is a module constant):

* **near-zero scores**: validation BLEU below `MIN_BLEU` and chrF below `MIN_CHRF` (what a model that outputs
  fluent nonsense scores: the news de->en run that motivated this check scored BLEU 0.04-0.14, chrF ~13);
* **flat loss**: the validation loss fell by less than `MIN_LOSS_DROP` (relative) from the first evaluation to
  the latest, over at least `MIN_EVALUATIONS_FOR_LOSS` evaluations;
* **unrelated to the source**: the validation chrF is not above the chrF of the same outputs scored against
  the references of other lines (`chrf_shuffled`: `evaluation.metrics.shuffled_reference_scores`, a seeded
  derangement) by `MIN_SOURCE_GAP` points and by a factor `MIN_SOURCE_RATIO`. Fluent target-language text that
  does not translate its input scores about the same against both (measured on 20-400 lines of multi30k en/de,
  Tanaka en/ja and Tatoeba zh: within 2.5 chrF points, e.g. 16.5 / 16.3; output keeping half the reference words:
  40 against 10). chrF is on characters, so the rule holds for every language, and is steadier than BLEU on a
  few hundred lines; the shuffled BLEU (the run's BLEU tokenizer) is reported beside it;
* **degenerate repetition**: more than `MAX_REPETITION` of the validation outputs repeat one n-gram of text
  units (`evaluation.metrics.repetition_rate`: words, or characters in Chinese, Japanese, Thai, ...) — a model
  looping on its own output.

A check that does not apply (no BLEU without `--predict_with_generate`) is skipped, and the file says which ran.
When the check never reaches a verdict (a warm-up as long as the run, fewer than two evaluations), it says so in
one line at the start when the schedule already shows it, and at the end, and the file records why
(`{"ok": null, "ran": false, "message": ...}`).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from transformers import TrainerCallback

from ..features.text_files import write_text_atomic

logger = logging.getLogger("xlpe.train")

LEARNING_CHECK_FILE = "learning_check.json"
MIN_BLEU = 1.0  # validation BLEU below this (and chrF below MIN_CHRF): no recognisable translation
MIN_CHRF = 20.0
MIN_LOSS_DROP = 0.02  # relative drop of the validation loss from the first evaluation to the latest
MIN_EVALUATIONS_FOR_LOSS = 3
MAX_REPETITION = 0.2  # share of validation outputs that repeat a 3-gram (of text units) 3 times or more
MIN_SOURCE_GAP = 3.0  # chrF points the outputs must score above the same outputs against shuffled references
MIN_SOURCE_RATIO = 1.25  # ... and this many times that score (a chrF 4 against 2 is still not a translation)


def metric_history(log_history: list[dict], name: str) -> list[tuple[int, float]]:
    """(step, value) of `eval_<name>` in a trainer log history, one per step (the latest wins), in step order."""
    values = {
        entry["step"]: float(entry[f"eval_{name}"])
        for entry in log_history
        if isinstance(entry.get(f"eval_{name}"), (int, float)) and "step" in entry
    }
    return sorted(values.items())


def diagnose(log_history: list[dict], warmup_steps: int = 0) -> dict:
    """The learning check's verdict from a trainer log history: {"ok": bool | None, "step", "evaluations",
    "problems": [str], "checks": {name: "passed" | "failed" | why it did not run}}. `ok` is None while it is too
    early to tell (fewer than two evaluations, or still in the warm-up)."""
    bleu, chrf = metric_history(log_history, "bleu"), metric_history(log_history, "chrf")
    loss, repetition = metric_history(log_history, "loss"), metric_history(log_history, "repetition")
    evaluations = max(len(bleu), len(loss))
    step = max([s for s, _ in bleu + loss] or [0])
    verdict: dict = {"ok": None, "step": step, "evaluations": evaluations, "problems": [], "checks": {}}
    if evaluations < 2 or step < warmup_steps:
        verdict["checks"] = {"all": f"too early ({evaluations} evaluation(s), step {step}, warm-up {warmup_steps})"}
        return verdict
    checks, problems = verdict["checks"], verdict["problems"]
    if bleu and chrf:
        low = bleu[-1][1] < MIN_BLEU and chrf[-1][1] < MIN_CHRF
        checks["scores"] = "failed" if low else "passed"
        if low:
            problems.append(
                f"validation BLEU {bleu[-1][1]:.2f} / chrF {chrf[-1][1]:.1f} after {len(bleu)} evaluations "
                f"(best BLEU {max(v for _, v in bleu):.2f}): no recognisable translation"
            )
    else:
        checks["scores"] = "not run: no BLEU in the evaluations (--predict_with_generate off)"
    if len(loss) >= MIN_EVALUATIONS_FOR_LOSS:
        first, last = loss[0][1], loss[-1][1]
        flat = first > 0 and (first - last) / first < MIN_LOSS_DROP
        checks["loss"] = "failed" if flat else "passed"
        if flat:
            problems.append(f"validation loss {first:.2f} -> {last:.2f} over {len(loss)} evaluations: not falling")
    else:
        checks["loss"] = f"not run: {len(loss)} evaluation(s) with a loss, {MIN_EVALUATIONS_FOR_LOSS} needed"
    _check_source(log_history, chrf, checks, problems)
    if repetition:
        share = repetition[-1][1]
        looping = share > MAX_REPETITION
        checks["repetition"] = "failed" if looping else "passed"
        if looping:
            problems.append(f"{share:.0%} of the validation outputs repeat a 3-gram 3 times or more")
    else:
        checks["repetition"] = "not run: no repetition rate in the evaluations"
    verdict["ok"] = not problems
    return verdict


def _check_source(log_history: list[dict], chrf: list, checks: dict, problems: list) -> None:
    """The shuffled-reference control: does the latest validation chrF owe anything to the source?"""
    shuffled = dict(metric_history(log_history, "chrf_shuffled"))
    if not chrf or chrf[-1][0] not in shuffled:
        checks["source"] = "not run: no chrF against shuffled references in the latest evaluation"
        return
    step, real = chrf[-1]
    control = shuffled[step]
    unrelated = real - control < MIN_SOURCE_GAP or real < MIN_SOURCE_RATIO * control
    checks["source"] = "failed" if unrelated else "passed"
    if unrelated:
        bleu = dict(metric_history(log_history, "bleu")).get(step)
        bleu_shuffled = dict(metric_history(log_history, "bleu_shuffled")).get(step)
        bleus = f" (BLEU {bleu:.2f} and {bleu_shuffled:.2f})" if bleu is not None and bleu_shuffled is not None else ""
        problems.append(
            f"validation chrF {real:.1f}, and {control:.1f} for the same outputs against the references of other "
            f"lines{bleus}: the outputs are hardly more like their own references than like any other line's, "
            "so they do not translate their sources"
        )


def advice(train_pairs: int | None, from_scratch: bool, on_gpu: bool, recipe: str | None = None) -> str:
    """What to try when the check fails, for this run's data, start point and recipe."""
    tips = []
    if from_scratch:
        if train_pairs is not None and train_pairs < 100_000:
            tips.append(
                f"{train_pairs:,} pairs are few for a model trained from scratch: fine-tune a pretrained "
                "checkpoint of the pair (--model_name_or_path), or add data"
            )
            if not on_gpu and recipe != "tiny":  # the news walk-through: `small` memorised, `tiny` learned
                tips.append("a smaller model trained for more passes (--recipe tiny)")
        else:
            tips.append("fine-tune a pretrained checkpoint of the pair (--model_name_or_path)")
    tips.append("train longer (--max_steps; the plan says what a step costs)")
    if on_gpu:
        tips.append("on a GPU, --recipe base")
    return "try: " + "; ".join(tips)


def why_not_run(verdict: dict, warmup_steps: int) -> str:
    """Why `diagnose` gave no verdict (`verdict["ok"]` None), with what to change."""
    reasons = []
    if verdict["step"] < warmup_steps:
        reasons.append(
            f"the learning-rate warm-up ({warmup_steps:,} steps) is not over by the last evaluation (step "
            f"{verdict['step']:,}); shorten it (--warmup_steps) or train longer (--max_steps)"
        )
    if verdict["evaluations"] < 2:
        reasons.append(
            f"{verdict['evaluations']} evaluation(s), two are needed; evaluate more often "
            "(--eval_strategy steps with a smaller --eval_steps)"
        )
    return "; ".join(reasons)


def scheduled_evaluation_steps(args, state) -> list[int]:
    """The steps at which this run evaluates the validation split: those already in the log history, the
    periodic ones still to come (`--eval_strategy` steps or epoch) and the final evaluation at the last step."""
    done = [step for step, _ in metric_history(state.log_history, "loss")]
    strategy, last = str(getattr(args.eval_strategy, "value", args.eval_strategy)), state.max_steps or 0
    every = getattr(state, "eval_steps", None) or args.eval_steps
    coming = []
    if strategy == "steps" and every:
        coming = list(range(int(every), last + 1, int(every)))
    elif strategy == "epoch":
        epochs = max(1, math.ceil(state.num_train_epochs or 1))
        coming = [math.ceil(last * k / epochs) for k in range(1, epochs + 1)]
    return sorted({*done, *(s for s in coming if s > state.global_step), last})


class LearningCheck(TrainerCallback):
    """Runs `diagnose` after every evaluation; prints one line when the verdict changes (a failure, and a
    recovery after one) and keeps the latest verdict, with the advice, in `output_dir/learning_check.json`.
    When the run's schedule leaves it no verdict, it says so at the start and at the end of training (or after
    the final evaluation, when that one could still give it a verdict), and records why in the file."""

    def __init__(self, train_pairs: int | None = None, from_scratch: bool = True, recipe: str | None = None):
        self.train_pairs, self.from_scratch, self.recipe = train_pairs, from_scratch, recipe
        self.reported: bool | None = None  # the last verdict printed (None: nothing printed yet)
        self.decided = False  # a verdict was written
        self.training_over = False

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        warmup = args.get_warmup_steps(state.max_steps or 0)
        planned = [{"step": step, "eval_loss": 1.0} for step in scheduled_evaluation_steps(args, state)]
        verdict = diagnose(planned, warmup)
        if verdict["ok"] is None:
            print(f"xlpe-train: the learning check will not run: {why_not_run(verdict, warmup)}", flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        self.training_over = True
        if not state.is_world_process_zero or self.decided:
            return
        warmup = args.get_warmup_steps(state.max_steps or 0)
        final = [*state.log_history, {"step": state.global_step, "eval_loss": 1.0}]  # the final evaluation's
        if diagnose(final, warmup)["ok"] is None:  # ... cannot give it a verdict either: say so now
            self._not_run(args, state, warmup)

    def _not_run(self, args, state, warmup: int) -> None:
        verdict = diagnose(state.log_history, warmup)
        why = why_not_run(verdict, warmup)
        record = {**verdict, "ran": False, "message": f"the learning check did not run: {why}"}
        write_text_atomic(Path(args.output_dir) / LEARNING_CHECK_FILE, json.dumps(record, indent=2))
        print(f"xlpe-train: {record['message']}", flush=True)
        self.decided = True

    def on_evaluate(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        warmup = args.get_warmup_steps(state.max_steps or 0)
        verdict = diagnose(state.log_history, warmup)
        if verdict["ok"] is None:
            if self.training_over and not self.decided:  # the final evaluation, and still no verdict
                self._not_run(args, state, warmup)
            return
        on_gpu = getattr(args, "device", None) is not None and args.device.type == "cuda"
        verdict["advice"] = (
            advice(self.train_pairs, self.from_scratch, on_gpu, self.recipe) if not verdict["ok"] else ""
        )
        verdict["message"] = "; ".join(verdict["problems"]) + (f". {verdict['advice']}" if verdict["advice"] else "")
        verdict["ran"] = True
        previous = self.reported
        write_text_atomic(Path(args.output_dir) / LEARNING_CHECK_FILE, json.dumps(verdict, indent=2))
        self.decided = True
        if not verdict["ok"] and previous is not False:
            print(f"xlpe-train: learning check failed at step {verdict['step']}: {verdict['message']}", flush=True)
        elif verdict["ok"] and previous is False:
            print(f"xlpe-train: learning check passed at step {verdict['step']} (it had failed before)", flush=True)
        self.reported = verdict["ok"]


def read_learning_check(output_dir: str | Path) -> dict | None:
    """The latest verdict of a run's learning check (`"ok": null` with `"ran": false` when it could not run, and
    why in `message`), or None (no file: no evaluation yet, or an older run)."""
    path = Path(output_dir) / LEARNING_CHECK_FILE
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None
