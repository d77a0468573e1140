"""Text units for decision rules: what "a word" means when a rule counts or compares lengths of text in any script.

Whitespace words are the unit of scripts that separate words with spaces (Latin, Cyrillic, Greek, Arabic,
Hebrew, Devanagari, Hangul: Korean separates its eojeol with spaces). Chinese, Japanese, Thai, Lao, Khmer and
Myanmar do not: a Japanese sentence is one whitespace "word", or two with one stray space. So a unit here is
decided per run of characters by Unicode block:

* a character of an unspaced script (`UNSPACED_RANGES`: CJK ideographs, kana, CJK punctuation and full-width
  forms, Thai, Lao, Khmer, Myanmar) is one unit, whatever spaces stand around it;
* any other run of non-space characters is one unit (a word), also inside an unspaced run: "iPhoneの画面" is
  ["iPhone", "の", "画", "面"].

A line mixing scripts is therefore counted in the units of each part; inserting or removing spaces inside an
unspaced run does not change its units. Units are code points (a Thai vowel or tone mark is a unit of its own).

These units are for decisions and reported counts only: the repetition rule of the learning check
(`xlpe.evaluation.metrics.repeats_ngram`), the output length ratio (`xlpe.evaluation.metrics.length_ratio`), the
card's choice of a short example sentence. The word unit of feature preparation (alignment, word ids: the model's
inputs) stays the whitespace word (`xlpe/features/prepare.py`).
"""

from __future__ import annotations

import re

# (first, last) code points of the blocks whose scripts write words without spaces between them
UNSPACED_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation (。、「」)
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # half-width and full-width forms (，！ and half-width katakana)
    (0x20000, 0x3134F),  # CJK unified ideographs extensions B-G
)
_CLASS = "".join(f"\\U{first:08x}-\\U{last:08x}" for first, last in UNSPACED_RANGES)
_UNIT = re.compile(f"[{_CLASS}]|[^\\s{_CLASS}]+")
_UNSPACED_CHARACTER = re.compile(f"[{_CLASS}]")


def text_units(text: str) -> list[str]:
    """The units of `text` in order: one per character of an unspaced script, one per whitespace-separated run
    of other characters ("私は iPhone を" -> ["私", "は", "iPhone", "を"]; "two words" -> ["two", "words"])."""
    return _UNIT.findall(text)


def unit_count(text: str) -> int:
    """len(text_units(text)): whitespace words, plus one per character of an unspaced script."""
    return len(_UNIT.findall(text))


def is_unspaced(unit: str) -> bool:
    """Whether `unit` (one of `text_units`) is a character of an unspaced script rather than a word."""
    return len(unit) == 1 and _UNSPACED_CHARACTER.match(unit) is not None


def unspaced_share(units: list[str]) -> float:
    """Share of `units` that are characters of unspaced scripts (0.0 for none)."""
    return sum(map(is_unspaced, units)) / len(units) if units else 0.0


__all__ = ["UNSPACED_RANGES", "is_unspaced", "text_units", "unit_count", "unspaced_share"]
