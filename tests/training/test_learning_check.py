"""The learning check (`xlpe/training/learning_check.py`): a model that cannot learn is reported in one line,
its verdict is kept for the card, a model that learns is not flagged, and the repetition measure it reads."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_train import tiny

from xlpe.evaluation.metrics import derangement, repeats_ngram, repetition_rate, shuffled_reference_scores
from xlpe.features.text_units import text_units
from xlpe.training.card_facts import learning_check
from xlpe.training.learning_check import LEARNING_CHECK_FILE, advice, diagnose, read_learning_check
from xlpe.training.run import main
from xlpe.training.trainer import score_translations


def history(bleu, chrf=None, loss=None, repetition=None, every=100, shuffled=None):
    """A trainer log history of periodic evaluations with these values (one list entry per evaluation);
    `shuffled`: the chrF of the same outputs against shuffled references."""
    entries = []
    for k, value in enumerate(bleu):
        entry = {"step": every * (k + 1), "eval_bleu": value, "eval_chrf": (chrf or [50.0] * len(bleu))[k]}
        if loss:
            entry["eval_loss"] = loss[k]
        if repetition:
            entry["eval_repetition"] = repetition[k]
        if shuffled:
            entry["eval_chrf_shuffled"] = shuffled[k]
        entries.append(entry)
    return entries


def test_a_model_that_learns_passes():
    verdict = diagnose(
        history([3.0, 12.7, 20.4], [25.0, 40.0, 48.0], [4.1, 3.2, 2.8], [0.05, 0.02, 0.01], shuffled=[14, 15, 15])
    )
    assert verdict["ok"] is True and verdict["problems"] == []
    assert verdict["checks"] == {"scores": "passed", "loss": "passed", "source": "passed", "repetition": "passed"}


def test_near_zero_scores_flat_loss_and_loops_each_fail():
    # the news de->en run this check was written for: BLEU 0.04-0.14, chrF ~13, loss ~5.8, 58 % looping outputs
    verdict = diagnose(
        history([0.04, 0.14, 0.09], [12.1, 12.7, 12.5], [5.85, 5.81, 5.80], [0.5, 0.58, 0.58], shuffled=[12, 12, 12])
    )
    assert verdict["ok"] is False and verdict["step"] == 300 and verdict["evaluations"] == 3
    assert set(verdict["checks"].values()) == {"failed"}
    text = " ".join(verdict["problems"])
    assert "BLEU 0.09" in text and "5.85 -> 5.80" in text and "58%" in text and "chrF 12.5, and 12.0" in text


# fluent sentences of a small grammar per language; a space joins words only where the script uses spaces
GRAMMARS = {
    "en": (
        " ",
        ["the teacher", "my sister", "a small dog", "the old man", "our neighbour", "that child"],
        ["likes", "sees", "finds", "draws", "helps", "calls"],
        ["the red car", "her friends", "a new book", "the river", "this house", "two birds"],
        ["today", "in the park", "every morning", "at home", "again", "after school"],
    ),
    "de": (
        " ",
        ["der Lehrer", "meine Schwester", "ein kleiner Hund", "der alte Mann", "unser Nachbar", "das Kind"],
        ["mag", "sieht", "findet", "malt", "hilft", "ruft"],
        ["das rote Auto", "ihre Freunde", "ein neues Buch", "den Fluss", "dieses Haus", "zwei Vögel"],
        ["heute", "im Park", "jeden Morgen", "zu Hause", "wieder", "nach der Schule"],
    ),
    "ja": (
        "",
        ["先生は", "私の姉は", "小さい犬は", "その老人は", "隣の人は", "あの子供は"],
        ["赤い車を", "友達を", "新しい本を", "川を", "この家を", "二羽の鳥を"],
        ["今日", "公園で", "毎朝", "家で", "また", "放課後に"],
        ["見ました。", "好きです。", "見つけた。", "描いた。", "助けた。", "呼んだ。"],
    ),
    "zh": (
        "",
        ["老师", "我姐姐", "一只小狗", "那个老人", "我们的邻居", "那个孩子"],
        ["今天", "在公园里", "每天早上", "在家", "又", "放学后"],
        ["喜欢", "看见", "找到", "画了", "帮助", "叫"],
        ["那辆红车。", "她的朋友。", "一本新书。", "那条河。", "这座房子。", "两只鸟。"],
    ),
    "th": (
        "",
        ["ครู", "พี่สาวของฉัน", "หมาตัวเล็ก", "ชายชรา", "เพื่อนบ้าน", "เด็กคนนั้น"],
        ["ชอบ", "เห็น", "พบ", "วาด", "ช่วย", "เรียก"],
        ["รถสีแดง", "เพื่อนของเธอ", "หนังสือเล่มใหม่", "แม่น้ำ", "บ้านหลังนี้", "นกสองตัว"],
        ["วันนี้", "ในสวน", "ทุกเช้า", "ที่บ้าน", "อีกครั้ง", "หลังเลิกเรียน"],
    ),
}


def sentences(language, count=60, seed=0):
    joiner, *slots = GRAMMARS[language]
    rng = random.Random(seed)
    return [joiner.join(rng.choice(words) for words in slots) for _ in range(count)]


def noisy(line, rng):
    """The reference with one unit dropped: a model that translates, not perfectly."""
    units = text_units(line)
    units.pop(rng.randrange(len(units)))
    return (" " if " " in line else "").join(units)


def control_verdict(hypotheses, references, language):
    """The learning check's verdict on two evaluations whose outputs are `hypotheses`, scored as the trainer's
    compute_metrics scores them (its BLEU tokenizer for `language`)."""
    scores = score_translations(hypotheses, references, language, "char" if language == "ja" else None)
    shuffled = shuffled_reference_scores(hypotheses, references, language, "char" if language == "ja" else None)
    entry = {"eval_bleu": scores["bleu"], "eval_chrf": scores["chrf"], "eval_chrf_shuffled": shuffled["chrf"]}
    entry["eval_bleu_shuffled"] = shuffled["bleu"]
    return diagnose([{"step": 100, **entry}, {"step": 200, **entry}])


@pytest.mark.parametrize("language", sorted(GRAMMARS))
def test_fluent_output_unrelated_to_the_source_fails_and_a_translation_passes(language):
    references = sentences(language)
    rng = random.Random(1)
    unrelated = references[len(references) // 2 :] + references[: len(references) // 2]  # other lines' references
    other_text = sentences(language, seed=7)  # or fluent sentences of its own
    translated = [noisy(line, rng) for line in references]
    for hypotheses in (unrelated, other_text):
        verdict = control_verdict(hypotheses, references, language)
        assert verdict["checks"]["source"] == "failed" and verdict["ok"] is False, verdict
        assert "do not translate their sources" in " ".join(verdict["problems"])
    verdict = control_verdict(translated, references, language)
    assert verdict["checks"]["source"] == "passed", verdict


def test_the_ja_en_run_that_passed_with_unrelated_output_now_fails():
    """Validation BLEU 2.95 / chrF 14.7 passed the near-zero rule; its outputs scored nearly as well against
    other lines' references."""
    verdict = diagnose(history([1.8, 2.95], [13.9, 14.7], shuffled=[12.9, 13.1]))
    assert verdict["checks"]["scores"] == "passed" and verdict["checks"]["source"] == "failed"
    assert verdict["ok"] is False and "chrF 14.7, and 13.1" in verdict["problems"][0]


@given(st.integers(2, 300), st.integers(0, 2**32 - 1))
def test_the_shuffled_order_moves_every_line_and_is_fixed_by_its_seed(n, seed):
    order = derangement(n, seed)
    assert sorted(order) == list(range(n)) and all(k != moved for k, moved in enumerate(order))
    assert derangement(n, seed) == order


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


@pytest.mark.parametrize(
    "flags, why",
    [
        (["--warmup_steps", "400"], "warm-up (400 steps) is not over by the last evaluation (step 4)"),
        (["--eval_steps", "10"], "1 evaluation(s), two are needed"),
    ],
)
def test_a_check_that_cannot_run_says_so_at_the_start_and_the_end(tmp_path, capsys, flags, why):
    """The `tiny` recipe's 400 warm-up steps with a short --max_steps, or evaluations too rare: the check gives
    no verdict, says so before training and after it, and the file (and so the card) records why."""
    run = tmp_path / "run"
    argv = [*tiny(tmp_path, "--do_train", "--do_eval", "--max_steps", "4"), "--eval_strategy", "steps"]
    main([*argv, "--eval_steps", "2", *flags])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "learning check" in line]
    assert len(lines) == 2, out[-3000:]
    assert lines[0].startswith("xlpe-train: the learning check will not run: ") and why in lines[0]
    assert lines[1].startswith("xlpe-train: the learning check did not run: ") and why in lines[1]
    verdict = read_learning_check(run)
    assert verdict["ok"] is None and verdict["ran"] is False and why in verdict["message"]
    assert learning_check(run)["ok"] is None  # what the card reads: no "did not learn" warning


def test_a_run_whose_check_can_run_says_nothing_about_it_not_running(tmp_path, capsys):
    argv = [*tiny(tmp_path, "--do_train", "--do_eval", "--max_steps", "4"), "--eval_strategy", "steps"]
    main([*argv, "--eval_steps", "2"])
    assert "not run" not in capsys.readouterr().out
    verdict = read_learning_check(tmp_path / "run")
    assert verdict["ran"] is True and verdict["checks"]["source"] in {"passed", "failed"}  # the control was logged
