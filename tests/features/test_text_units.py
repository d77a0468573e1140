"""Text units (`xlpe/features/text_units.py`): whitespace words where scripts separate words with spaces,
characters in runs of Chinese, Japanese, Thai, Lao, Khmer and Myanmar, decided per run so mixed lines work."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xlpe.features.text_units import is_unspaced, text_units, unit_count, unspaced_share

CJK = st.text(alphabet="私は学生です画面が割れた我们的。、", min_size=1, max_size=30)
THAI = st.text(alphabet="ภาษาไทยง่ายที่่", min_size=1, max_size=30)
UNSPACED = st.one_of(CJK, THAI)
WORD = st.text(alphabet="abcxyzÄéßжд가나다", min_size=1, max_size=8)  # Latin, Cyrillic, Hangul: spaced scripts
LINE = st.lists(st.one_of(WORD, UNSPACED), min_size=0, max_size=8).map(" ".join)


def test_examples_by_script():
    assert text_units("two dogs play") == ["two", "dogs", "play"]
    assert text_units("私は学生です") == ["私", "は", "学", "生", "で", "す"]
    assert text_units("私は iPhone を買った。") == ["私", "は", "iPhone", "を", "買", "っ", "た", "。"]
    assert text_units("画面iPhone画面") == ["画", "面", "iPhone", "画", "面"]  # a Latin word inside a CJK run
    assert text_units("안녕하세요 세계") == ["안녕하세요", "세계"]  # Korean separates words with spaces
    assert unit_count("ภาษาไทย") == 7  # Thai: code points
    assert text_units("") == [] and unit_count(" \t ") == 0
    assert is_unspaced("の") and not is_unspaced("iPhone") and not is_unspaced("a")
    assert unspaced_share(text_units("私は iPhone")) == 2 / 3 and unspaced_share([]) == 0.0


@given(st.text(alphabet="abcdef \t", max_size=40))
def test_space_separated_text_is_its_whitespace_words(text):
    assert text_units(text) == text.split()


@given(LINE, st.integers(1, 5))
def test_repeating_a_line_k_times_multiplies_its_units_by_k(line, k):
    assert unit_count(" ".join([line] * k)) == k * unit_count(line)
    assert text_units(" ".join([line] * k)) == text_units(line) * k


@given(LINE, LINE)
def test_units_of_two_lines_joined_by_a_space_are_their_units_in_turn(first, second):
    assert text_units(f"{first} {second}") == text_units(first) + text_units(second)


@given(UNSPACED, st.data())
def test_a_space_inside_an_unspaced_run_changes_nothing(run, data):
    cut = data.draw(st.integers(0, len(run)))
    spaced = run[:cut] + data.draw(st.sampled_from([" ", "  ", "\t"])) + run[cut:]
    assert text_units(spaced) == text_units(run) == list(run)


@given(UNSPACED, WORD)
def test_a_word_inside_an_unspaced_run_is_one_unit(run, word):
    assert text_units(run + word + run) == [*run, word, *run]
    assert text_units(f"{run} {word} {run}") == [*run, word, *run]


def test_the_cards_short_example_is_short_in_every_script():
    from xlpe.training.card_facts import EXAMPLE_WORDS, first_source_sentence

    long_japanese = "彼女は" + "とても" * EXAMPLE_WORDS + "先生が好きです。"  # one whitespace "word"
    assert first_source_sentence([long_japanese, "先生が好きです。"]) == "先生が好きです。"
    assert first_source_sentence([long_japanese]) == long_japanese  # none short: the first one
