"""xlpe-train states its plan (steps, evaluations and their size) before training, estimates the
run's wall time from the first measured steps and again after the first evaluation, and the periodic evaluation is
bounded (`--eval_subset`, recipe small: 200 sentences) while the final evaluation scores the whole split."""

from __future__ import annotations

import re

import pytest
from test_recipes import text_files
from test_train import tiny

from xlpe.training.plan import (
    RunShape,
    beam_factor,
    estimate_line,
    estimate_run,
    periodic_evaluations,
    plan_line,
)
from xlpe.training.recipes import recipe_settings, sized_epochs
from xlpe.training.run import main


def test_periodic_evaluations_are_counted_in_the_steps_left():
    assert periodic_evaluations(0, 1200, 200, True) == 6
    assert periodic_evaluations(400, 1200, 200, True) == 4  # a resume from step 400
    # 5 at multiples of 200, and one at step 1199, where training ends (transformers evaluates there too)
    assert periodic_evaluations(0, 1199, 200, True) == 6 and periodic_evaluations(0, 1200, 200, False) == 0
    assert periodic_evaluations(0, 150, 200, True) == 1 and periodic_evaluations(1100, 1150, 200, True) == 1


def test_estimate_splits_the_run_and_names_what_dominates():
    shape = RunShape(
        steps=1200,
        evaluations=6,
        eval_sentences=200,
        eval_beams=1,
        final_sentences=1014,
        test_sentences=1000,
        final_beams=4,
    )
    early = estimate_run(shape, 1.5, None)
    assert early["total"] == 1800 and early["dominant"] == "training" and "periodic evaluations" not in early
    full = estimate_run(shape, 1.5, 20.0)
    assert full["periodic evaluations"] == 120
    assert full["final evaluation + test"] == pytest.approx(20.0 / 200 * beam_factor(4) * 2014) and beam_factor(
        4
    ) == pytest.approx(2.5)
    assert full["total"] == pytest.approx(1800 + 120 + full["final evaluation + test"])
    assert sum(full["shares"].values()) == pytest.approx(1.0)
    line = estimate_line(full, "after the first evaluation")
    assert line.startswith("estimate after the first evaluation: ") and "training dominates" in line
    assert "periodic evaluations 2.0 min (5%)" in line


def test_plan_line_states_steps_evaluations_and_what_follows():
    shape = RunShape(1200, 6, 200, 1, 1014, 2000, 4)
    assert plan_line(shape, "token batches of 2,048 tokens", 1014) == (
        "plan: 1,200 training steps (token batches of 2,048 tokens), 6 periodic evaluations on 200 of 1,014 "
        "validation sentences (greedy); then the final evaluation on 1,014 validation sentences and the test split's "
        "2,000 sentences (4 beams); time estimate after the first steps"
    )


def test_an_xl_test_split_decoded_twice_is_said_and_estimated_as_such():
    """An XL PE model whose test split has oracle positions decodes it twice (predicted, then oracle): the plan says
    the split's size and that it is decoded twice, and the estimate counts both passes."""
    shape = RunShape(800, 0, 0, 1, 200, 300, 4, test_passes=2)
    assert "the test split's 300 sentences (twice: predicted, then oracle positions) (4 beams)" in plan_line(
        shape, "64 pairs a batch", 200
    )
    once = estimate_run(RunShape(800, 4, 100, 1, 200, 300, 4), 0.1, 10.0)
    twice = estimate_run(RunShape(800, 4, 100, 1, 200, 300, 4, test_passes=2), 0.1, 10.0)
    assert twice["final evaluation + test"] == pytest.approx(
        once["final evaluation + test"] * (200 + 2 * 300) / (200 + 300)
    )


def test_the_small_recipe_bounds_its_periodic_evaluation():
    assert recipe_settings("small", True)["eval_subset"] == 200
    assert "eval_subset" not in recipe_settings("small", True, with_validation=False)


def six_step_run(tmp_path, *extra: str) -> dict:
    """A tiny 6-step run of 40 pairs with periodic evaluation on (at most 8 validation sentences): its metrics."""
    arguments = ["--do_train", "--do_eval", "--max_steps", "6", "--eval_strategy", "steps", "--max_eval_samples", "8"]
    return main(tiny(tmp_path, *text_files(tmp_path, 40), *arguments, *extra))


def test_a_run_prints_its_plan_and_estimates_and_the_final_evaluation_scores_the_whole_split(tmp_path, capsys):
    metrics = six_step_run(tmp_path, "--eval_steps", "3", "--eval_subset", "3")
    out = capsys.readouterr().out
    epochs = re.search(r"xlpe-train: plan: up to 6 training steps = ([\d.]+) epochs of (\d+) steps \(", out)
    assert epochs and float(epochs[1]) == pytest.approx(6 / int(epochs[2]), abs=0.05), out  # the passes the steps make
    assert (
        "steps (8 pairs a batch; early stopping may end the run sooner), 2 "
        "periodic evaluations on 3 of 8 validation sentences (greedy); then the final evaluation on 8 validation "
        "sentences (2 beams)" in out
    )  # (the small recipe, chosen for a model from scratch, stops early)
    assert re.search(
        r"xlpe-train: estimate at step 3, after evaluation 1 of 2 \(\d+ s; [\d.]+ s a step so far\): "
        r".* in all on this machine: "
        r"training .*, periodic evaluations .*, final evaluation \+ test .*; \w.* dominates",
        out,
    )
    assert re.search(
        r"xlpe-train: training took .*, 2 periodic evaluations .* of it \(\d+%\); estimated .* for that part", out
    )
    assert metrics["eval_samples"] == 8  # the final evaluation: the whole (limited) split, not the subset


def test_the_first_estimate_counts_the_evaluations_from_a_timed_decode():
    """Before any evaluation has run, a timed greedy decode (seconds a sentence) stands in for the
    evaluations, so the first estimate is not the training alone."""
    shape = RunShape(1200, 6, 200, 1, 1014, 1000, 4, test_passes=2)
    probed = estimate_run(shape, 1.0, None, seconds_per_sentence=0.05)
    assert probed["periodic evaluations"] == pytest.approx(6 * 200 * 0.05)
    assert probed["final evaluation + test"] == pytest.approx(0.05 * beam_factor(4) * (1014 + 2 * 1000))
    assert probed["pending"] == "evaluations estimated from a timed greedy decode at the reference length"
    # the same numbers as a measured periodic evaluation of that cost would give
    assert probed["total"] == pytest.approx(estimate_run(shape, 1.0, 200 * 0.05)["total"])
    # no periodic evaluation: the final parts from the probe alone
    final_only = estimate_run(RunShape(100, 0, 0, 1, 50, 30, 2), 1.0, None, seconds_per_sentence=0.1)
    assert final_only["final evaluation + test"] == pytest.approx(0.1 * beam_factor(2) * 80)
    assert "periodic evaluations" not in final_only
    # a measured evaluation wins over the probe
    measured = estimate_run(shape, 1.0, 30.0, seconds_per_sentence=0.05)
    assert measured["periodic evaluations"] == 180 and measured["pending"] == ""


def test_the_first_printed_estimate_already_counts_evaluations(tmp_path, capsys, monkeypatch):
    import xlpe.training.plan as plan

    original = plan.RunPlan.__init__

    def measure_early(self, *args, **kwargs):  # the tiny run has 6 steps: estimate after 3
        original(self, *args, **{**kwargs, "measure_steps": 3})

    monkeypatch.setattr(plan.RunPlan, "__init__", measure_early)
    six_step_run(tmp_path, "--eval_steps", "5")
    out = capsys.readouterr().out
    first = re.search(r"xlpe-train: estimate after 3 steps \([\d.]+ s a step\): (.*)", out)
    assert first, out
    assert "(evaluations estimated from a timed greedy decode at the reference length)" in first[1]
    assert "periodic evaluations" in first[1] and "final evaluation + test" in first[1]


def test_the_recipe_line_says_the_epochs_that_will_run():
    from types import SimpleNamespace

    from xlpe.training.run import sized_recipe_note

    sized = sized_epochs("small", 50_000)
    assert f"; {sized:g} epochs for 50,000 training pairs" in sized_recipe_note(
        "small", 50_000, SimpleNamespace(max_steps=-1, num_train_epochs=sized)
    )
    given = sized_recipe_note("small", 50_000, SimpleNamespace(max_steps=-1, num_train_epochs=2.0))
    assert given == f"; 2 epochs as given (the recipe sizes {sized:g} for 50,000 training pairs)"
    bounded = sized_recipe_note("small", 50_000, SimpleNamespace(max_steps=300, num_train_epochs=sized))
    assert bounded.startswith("; --max_steps 300 bounds the run") and f"{sized:g} epochs, does not apply" in bounded


def test_the_evaluation_at_the_last_step_is_in_the_planned_count(tmp_path, capsys):
    six_step_run(tmp_path, "--eval_steps", "4", "--eval_subset", "3", "--early_stopping_patience", "0")
    out = capsys.readouterr().out
    counts = [(int(n), int(m)) for n, m in re.findall(r"after evaluation (\d+) of (\d+)", out)]
    assert counts == [(1, 2), (2, 2)], out  # at step 4, and at step 6 where training ends
