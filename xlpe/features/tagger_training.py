"""Train a POS tagger for a language with no built-in one (`xlpe-tagger train`; used as "perceptron:<file>").

mvPE+POS and XL PE + POS need a tagger of the source language. NLTK ships one for English and jieba tags
Chinese; for any other language (German, the XL PE paper's IWSLT source) this module trains NLTK's averaged
perceptron (Collins 2002; NLTK's features) on a Universal Dependencies treebank and writes it as one JSON file
that a model then carries beside its weights (the "perceptron" tagger of the registry, xlpe/models/taggers.py,
reads it, in training and in the pipeline).

The unit is the whitespace word, as everywhere in xlpe (alignments, the oracle, `tag_sentence`): a treebank
token glued to the next one (`SpaceAfter=No`, e.g. "Haus" + ".") is merged with it into the word "Haus.", which
takes the tag of its first non-punctuation token (PUNCT only when every part is punctuation). A multi-word token
("zum" = "zu" + "dem") is read as its surface form with the tag of its first syntactic word. Either tag column
can be learned: UPOS (17 universal tags, the default: reliable from small treebanks) or XPOS (the treebank's
language-specific tags, e.g. STTS for German).

Training is deterministic for a given seed (NLTK shuffles the sentences with Python's `random` between passes;
the global random state is restored afterwards).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..models.taggers import TAGGER_FILE_FORMAT
from .text_files import read_text_lines

TAG_COLUMNS = {"upos": 3, "xpos": 4}  # CoNLL-U columns (0-based) of the two tag sets
PUNCT_TAGS = {"PUNCT", "$.", "$,", "$("}  # UPOS punctuation and STTS's punctuation tags

TaggedSentence = list[tuple[str, str]]  # (whitespace word, tag) pairs


# ---------------------------------------------------------------------------------------------------------
# Reading CoNLL-U
# ---------------------------------------------------------------------------------------------------------


def _word_tag(parts: Sequence[tuple[str, str]]) -> str:
    """The tag of a whitespace word made of treebank tokens: its first non-punctuation tag, else the first."""
    return next((tag for _, tag in parts if tag not in PUNCT_TAGS), parts[0][1])


def read_conllu(path: str | os.PathLike, column: str = "upos", lowercase: bool = False) -> list[TaggedSentence]:
    """Sentences of a CoNLL-U file (plain or .gz) as whitespace words with tags (module docstring).

    Malformed lines raise ValueError naming the file and line: fewer than 10 tab-separated fields, a token id
    that is neither "n", "n-m" nor "n.m", an empty form or tag ("_" as tag counts as empty)."""
    if column not in TAG_COLUMNS:
        raise ValueError(f"column must be one of {sorted(TAG_COLUMNS)}, got {column!r}")
    index = TAG_COLUMNS[column]
    sentences: list[TaggedSentence] = []
    words: TaggedSentence = []
    parts: list[tuple[str, str]] = []  # tokens of the whitespace word being built
    span = None  # the multi-word token being read: (surface form, misc, first word id, last word id)

    def close_word():
        if parts:
            words.append(("".join(form for form, _ in parts), _word_tag(parts)))
            parts.clear()

    def add(form: str, tag: str, misc: str):
        parts.append((form.lower() if lowercase else form, tag))
        if "SpaceAfter=No" not in misc.split("|"):
            close_word()

    for number, line in enumerate(read_text_lines(path), 1):  # lines end at \n only (text_files.py)
        if not line.strip():  # end of sentence
            close_word()
            if words:
                sentences.append(list(words))
            words.clear()
            span = None
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise ValueError(f"{path}:{number}: expected 10 tab-separated CoNLL-U fields, got {len(fields)}")
        token_id, form, tag, misc = fields[0], fields[1], fields[index], fields[9]
        first, dash, last = token_id.partition("-")
        if "." in token_id and token_id.replace(".", "", 1).isdigit():  # an empty node: not in the text
            continue
        if dash:  # a multi-word token: its surface form, tagged by its first syntactic word
            if not (first.isdigit() and last.isdigit() and int(first) < int(last)) or not form:
                raise ValueError(f"{path}:{number}: bad multi-word token {token_id!r} {form!r}")
            span = (form, misc, int(first), int(last))
            continue
        if not token_id.isdigit():
            raise ValueError(f"{path}:{number}: bad token id {token_id!r}")
        if not form or tag in ("", "_"):
            raise ValueError(f"{path}:{number}: empty form or {column} tag")
        if span is not None and span[2] <= int(token_id) <= span[3]:
            if int(token_id) == span[2]:
                parts.append((span[0].lower() if lowercase else span[0], tag))
            if int(token_id) == span[3]:
                if "SpaceAfter=No" not in span[1].split("|"):
                    close_word()
                span = None
            continue
        add(form, tag, misc)
    close_word()
    if words:
        sentences.append(list(words))
    return sentences


def read_treebanks(
    paths: Iterable[str | os.PathLike], column: str = "upos", lowercase: bool = False
) -> list[TaggedSentence]:
    """`read_conllu` of several files, concatenated; FileNotFoundError naming a missing one."""
    sentences = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such CoNLL-U file")
        sentences += read_conllu(path, column, lowercase)
    return sentences


# ---------------------------------------------------------------------------------------------------------
# Training, saving, scoring
# ---------------------------------------------------------------------------------------------------------


def train_perceptron_tagger(sentences: Sequence[TaggedSentence], iterations: int = 5, seed: int = 0):
    """NLTK's averaged-perceptron tagger trained on `sentences` for `iterations` passes (deterministic per seed)."""
    from nltk.tag.perceptron import PerceptronTagger

    if not sentences:
        raise ValueError("no training sentences")
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    state = random.getstate()
    random.seed(seed)
    try:
        tagger = PerceptronTagger(load=False)
        tagger.train([list(sentence) for sentence in sentences], nr_iter=iterations)
    finally:
        random.setstate(state)
    return tagger


def save_tagger(tagger, path: str | os.PathLike, lowercase: bool = False, details: dict | None = None) -> None:
    """Write the tagger file (taggers.read_tagger_file reads it): tags sorted, atomic replace."""
    data = {
        "format": TAGGER_FILE_FORMAT,
        "version": 1,
        "tags": sorted(tagger.classes),
        "lowercase": bool(lowercase),
        "details": details or {},
        "tagdict": tagger.tagdict,
        "weights": tagger.model.weights,
    }
    from .text_files import write_text_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, ensure_ascii=False, sort_keys=True))  # temporary sibling, renamed


def tagging_accuracy(tagger, sentences: Sequence[TaggedSentence]) -> dict:
    """Word accuracy of `tagger` (NLTK's perceptron) on gold `sentences`: overall, on the words its tag
    dictionary settles (frequent unambiguous training words) and on the rest; the five commonest confusions."""
    correct = total = in_dict = in_dict_correct = 0
    confusions: Counter = Counter()
    for sentence in sentences:
        words = [word for word, _ in sentence]
        for (word, gold), (_, guess) in zip(sentence, tagger.tag(words)):
            total += 1
            correct += guess == gold
            if word in tagger.tagdict:
                in_dict += 1
                in_dict_correct += guess == gold
            if guess != gold:
                confusions[f"{gold}->{guess}"] += 1
    return {
        "words": total,
        "accuracy": correct / total if total else None,
        "tagdict_words": in_dict,
        "tagdict_accuracy": in_dict_correct / in_dict if in_dict else None,
        "other_accuracy": (correct - in_dict_correct) / (total - in_dict) if total > in_dict else None,
        "top_confusions": dict(confusions.most_common(5)),
    }


__all__ = ["TAG_COLUMNS", "read_conllu", "read_treebanks", "save_tagger", "tagging_accuracy", "train_perceptron_tagger"]
