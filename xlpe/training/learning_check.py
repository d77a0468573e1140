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
* **degenerate repetition**: more than `MAX_REPETITION` of the validation outputs repeat one word n-gram
  (`evaluation.metrics.repetition_rate`) — a model looping on its own output.

A check that does not apply (no BLEU without `--predict_with_generate`) is skipped, and the file says which ran.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback

from ..features.text_files import write_text_atomic

logger = logging.getLogger("xlpe.train")

LEARNING_CHECK_FILE = "learning_check.json"
MIN_BLEU = 1.0  # validation BLEU below this (and chrF below MIN_CHRF): no recognisable translation
MIN_CHRF = 20.0
MIN_LOSS_DROP = 0.02  # relative drop of the validation loss from the first evaluation to the latest
MIN_EVALUATIONS_FOR_LOSS = 3
MAX_REPETITION = 0.2  # share of validation outputs that repeat a word 3-gram 3 times or more


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


class LearningCheck(TrainerCallback):
    """Runs `diagnose` after every evaluation; prints one line when the verdict changes (a failure, and a
    recovery after one) and keeps the latest verdict, with the advice, in `output_dir/learning_check.json`."""

    def __init__(self, train_pairs: int | None = None, from_scratch: bool = True, recipe: str | None = None):
        self.train_pairs, self.from_scratch, self.recipe = train_pairs, from_scratch, recipe
        self.reported: bool | None = None  # the last verdict printed (None: nothing printed yet)

    def on_evaluate(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        verdict = diagnose(state.log_history, args.get_warmup_steps(state.max_steps or 0))
        if verdict["ok"] is None:
            return
        on_gpu = getattr(args, "device", None) is not None and args.device.type == "cuda"
        verdict["advice"] = (
            advice(self.train_pairs, self.from_scratch, on_gpu, self.recipe) if not verdict["ok"] else ""
        )
        verdict["message"] = "; ".join(verdict["problems"]) + (f". {verdict['advice']}" if verdict["advice"] else "")
        previous = self.reported
        write_text_atomic(Path(args.output_dir) / LEARNING_CHECK_FILE, json.dumps(verdict, indent=2))
        if not verdict["ok"] and previous is not False:
            print(f"xlpe-train: learning check failed at step {verdict['step']}: {verdict['message']}", flush=True)
        elif verdict["ok"] and previous is False:
            print(f"xlpe-train: learning check passed at step {verdict['step']} (it had failed before)", flush=True)
        self.reported = verdict["ok"]


def read_learning_check(output_dir: str | Path) -> dict | None:
    """The latest verdict of a run's learning check, or None (no periodic evaluation ran, or an older run)."""
    path = Path(output_dir) / LEARNING_CHECK_FILE
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None
