"""The learning check (`xlpe/training/learning_check.py`): a model that cannot learn is reported in one line,
its verdict is kept for the card, a model that learns is not flagged, and the repetition measure it reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_train import tiny

from xlpe.evaluation.metrics import repeats_ngram, repetition_rate
from xlpe.training.learning_check import LEARNING_CHECK_FILE, advice, diagnose, read_learning_check
from xlpe.training.run import main


def history(bleu, chrf=None, loss=None, repetition=None, every=100):
    """A trainer log history of periodic evaluations with these values (one list entry per evaluation)."""
    entries = []
    for k, value in enumerate(bleu):
        entry = {"step": every * (k + 1), "eval_bleu": value, "eval_chrf": (chrf or [50.0] * len(bleu))[k]}
        if loss:
            entry["eval_loss"] = loss[k]
        if repetition:
            entry["eval_repetition"] = repetition[k]
        entries.append(entry)
    return entries


def test_a_model_that_learns_passes():
    verdict = diagnose(history([3.0, 12.7, 20.4], [25.0, 40.0, 48.0], [4.1, 3.2, 2.8], [0.05, 0.02, 0.01]))
    assert verdict["ok"] is True and verdict["problems"] == []
    assert verdict["checks"] == {"scores": "passed", "loss": "passed", "repetition": "passed"}


def test_near_zero_scores_flat_loss_and_loops_each_fail():
    # the news de->en run this check was written for: BLEU 0.04-0.14, chrF ~13, loss ~5.8, 58 % looping outputs
    verdict = diagnose(history([0.04, 0.14, 0.09], [12.1, 12.7, 12.5], [5.85, 5.81, 5.80], [0.5, 0.58, 0.58]))
    assert verdict["ok"] is False and verdict["step"] == 300 and verdict["evaluations"] == 3
    assert set(verdict["checks"].values()) == {"failed"}
    text = " ".join(verdict["problems"])
    assert "BLEU 0.09" in text and "5.85 -> 5.80" in text and "58%" in text


def test_too_early_to_tell():
    assert diagnose(history([0.0]))["ok"] is None  # one evaluation
    assert diagnose(history([0.0, 0.0]), warmup_steps=4000)["ok"] is None  # still warming up
    assert diagnose([])["ok"] is None


def test_a_check_without_its_metric_does_not_run():
    verdict = diagnose([{"step": 100, "eval_loss": 3.0}, {"step": 200, "eval_loss": 2.0}])
    assert verdict["ok"] is True and verdict["checks"]["scores"].startswith("not run")
    assert verdict["checks"]["loss"].startswith("not run")  # two evaluations, three needed


def test_advice_names_the_way_out_for_the_data():
    assert "12,000 pairs are few" in advice(12_000, from_scratch=True, on_gpu=False)
    assert "--recipe tiny" in advice(12_000, from_scratch=True, on_gpu=False, recipe="small")
    assert "--recipe tiny" not in advice(12_000, from_scratch=True, on_gpu=False, recipe="tiny")
    assert "--model_name_or_path" not in advice(12_000, from_scratch=False, on_gpu=False)
    assert "--recipe base" in advice(2_000_000, from_scratch=True, on_gpu=True)


def test_repeats_ngram_examples():
    assert repeats_ngram("It is not to be able to be able to be able to be")
    assert not repeats_ngram("Two dogs play in the snow near two dogs")
    assert repeats_ngram("我们的我们的我们的我们的")  # no spaces: grams of 6 characters
    assert repeats_ngram("abcabcabcabc")  # one long word: its characters
    assert repetition_rate([]) == 0.0
    assert repetition_rate(["a b c a b c a b c", "a b c"]) == 0.5


def test_a_looping_line_is_caught_in_every_script_and_mix():
    """A loop in Japanese is caught with a stray space or a Latin word in it (whitespace words would miss it:
    three identical "words" hold no 3-gram three times)."""
    loop = "彼女はその先生が好きです。"
    for line in (loop * 4, loop * 2 + " " + loop * 2, " ".join([loop] * 4), ("iPhoneの画面が割れた " * 4).strip()):
        assert repeats_ngram(line), line
    assert repeats_ngram("ภาษาไทยง่าย" * 4) and repeats_ngram("안녕하세요 반갑습니다 " * 4)  # Thai, Korean
    # natural sentences whose short character sequences recur are not loops
    assert not repeats_ngram("彼は走っている、彼女は歌っている、子供は泣いている、犬は寝ている。")
    assert not repeats_ngram("我们的国家，我们的人民，我们的未来。")


@given(st.text(alphabet="私は学生です画面が割れた。", min_size=1, max_size=12), st.integers(4, 6), st.data())
def test_spaces_inside_a_japanese_loop_do_not_hide_it(phrase, k, data):
    line = phrase * k
    cuts = sorted(data.draw(st.lists(st.integers(0, len(line)), max_size=3)))
    spaced = "".join(line[a:b] + " " for a, b in zip([0, *cuts], [*cuts, len(line)]))
    assert repeats_ngram(spaced) == repeats_ngram(line)
    if (k - 2) * len(phrase) >= 6:  # then the line's first 6-character gram recurs at phrase lengths 1 and 2
        assert repeats_ngram(line)


@given(st.lists(st.text(alphabet="abcdef ", max_size=40), max_size=8))
def test_repetition_rate_is_the_share_of_looping_lines(lines):
    rate = repetition_rate(lines)
    assert 0.0 <= rate <= 1.0
    assert rate * len(lines) == pytest.approx(sum(repeats_ngram(line) for line in lines))
    assert repetition_rate([line + " x y z" * 3 for line in lines]) == (1.0 if lines else 0.0)


def test_a_run_that_cannot_learn_is_reported_in_one_line(tmp_path, capsys):
    """End to end: a learning rate too small to move the weights; three evaluations; the check fires once, says
    what to try, and leaves its verdict for the card."""
    run = tmp_path / "run"
    argv = [*tiny(tmp_path, "--do_train", "--do_eval", "--max_steps", "6"), "--learning_rate", "1e-9"]
    argv += ["--eval_strategy", "steps", "--eval_steps", "2"]
    main(argv)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("xlpe-train: learning check")]
    assert len(lines) == 1 and "failed at step 4" in lines[0] and "try:" in lines[0], out[-2000:]
    verdict = read_learning_check(run)
    assert verdict["ok"] is False and verdict["step"] == 6 and verdict["checks"]["scores"] == "failed"
    assert json.loads((run / LEARNING_CHECK_FILE).read_text()) == verdict


def test_a_new_run_over_an_old_one_drops_its_verdict(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LEARNING_CHECK_FILE).write_text(json.dumps({"ok": False, "message": "an earlier run"}))
    main(tiny(tmp_path, "--do_train", "--max_steps", "2", "--overwrite_output_dir"))
    assert read_learning_check(run) is None
