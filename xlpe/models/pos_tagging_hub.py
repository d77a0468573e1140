"""POS tags for raw source text inside a saved model (the translation pipeline of the mvPE + POS family).

`RawTextTagger(tagger_name, tags, nltk_data)` tags raw text with a real tagger and projects the word tags onto
the sub-word tokens of a fast tokenizer, returning the `pos_tag_ids` the model expects (Eq. 11):

* taggers: "nltk-en" (NLTK's averaged-perceptron PTB tagger on whitespace-separated words, as `xlpe-prepare`),
  "jieba-zh" (dictionary tag of a pre-segmented word, else jieba's segmentation + tags), "spacy:<model>"
  (spaCy's fine-grained `tag_`, when spaCy is installed);
* ids: 0 = "<pad>", 1 = "<unk>", 2 = "<special>", then the model's tags in config order, the same convention as
  `xlpe.tagging.TagVocabulary`. A tag the vocabulary lacks becomes 1 and is counted in `unknown_tags`;
* projection: a token takes the tag of the tagged word that contains its first non-space character (found from
  the token's character offsets, so a whitespace piece such as Metaspace's lone "▁" takes the next word's tag);
  tokens with no word (`word_ids()` None: </s>, <s>) get "<special>", padding gets "<pad>".

This file travels as Hub custom code with `modeling_mvpe_pos.py`: it imports only the standard library and
torch at module level; nltk, jieba and spaCy are imported inside functions, in `try` blocks, so a saved model
loads where they are missing (only tagging then fails, with an error that says what to install).
"""

from __future__ import annotations

import bisect
import os
import re
from collections import Counter
from collections.abc import Callable

import torch

from .tag_sets import PAD_TAG_ID, SPECIAL_TAG_ID, SPECIAL_TAG_NAMES, UNK_TAG_ID  # noqa: F401

NLTK_DATA_ENV = ("XLPE_NLTK_DATA", "NLTK_DATA")  # extra nltk data directories, besides config.nltk_data

Span = tuple[int, int, str]  # (start char, end char, tag) of one tagged word


def tag_to_id_map(tags: list[str]) -> dict[str, int]:
    """{"<pad>": 0, "<unk>": 1, "<special>": 2, tags[0]: 3, ...}."""
    return {**{name: index for index, name in enumerate(SPECIAL_TAG_NAMES)}, **{tag: len(SPECIAL_TAG_NAMES) + i for i, tag in enumerate(tags)}}


# ---------------------------------------------------------------------------------------------------------
# Taggers: text -> tagged character spans
# ---------------------------------------------------------------------------------------------------------


def nltk_english_tagger(nltk_data: str | None = None) -> Callable[[str], list[Span]]:
    """NLTK's averaged-perceptron PTB tagger over the whitespace-separated words of the text."""
    try:
        import nltk
        from nltk.tag import PerceptronTagger
    except ImportError as error:
        raise ImportError("the 'nltk-en' tagger needs nltk: pip install nltk") from error
    for path in (nltk_data, *(os.environ.get(name) for name in NLTK_DATA_ENV)):
        if path and path not in nltk.data.path:
            nltk.data.path.insert(0, path)
    try:
        tagger = PerceptronTagger()
    except LookupError as error:
        raise ValueError(
            "the 'nltk-en' tagger needs NLTK's averaged_perceptron_tagger_eng data: set config.nltk_data or "
            f"$XLPE_NLTK_DATA to a directory holding taggers/averaged_perceptron_tagger_eng ({error})"
        ) from error

    def tag(text: str) -> list[Span]:
        words = [(match.start(), match.end(), match.group()) for match in re.finditer(r"\S+", text)]
        tagged = tagger.tag([word for _, _, word in words]) if words else []
        return [(start, end, word_tag) for (start, end, _), (_, word_tag) in zip(words, tagged)]

    return tag


def jieba_chinese_tagger() -> Callable[[str], list[Span]]:
    """jieba's tags. Each whitespace-separated chunk that is a jieba dictionary word gets its dictionary tag
    (as `xlpe.tagging.JiebaTagger` tags pre-segmented training text); any other chunk, e.g. a whole raw
    sentence, is segmented by `jieba.posseg` and each piece keeps its own tag."""
    try:
        import logging

        import jieba
        import jieba.posseg
    except ImportError as error:
        raise ImportError("the 'jieba-zh' tagger needs jieba: pip install jieba") from error
    jieba.setLogLevel(logging.WARNING)
    jieba.posseg.dt.initialize()
    dictionary_tags = jieba.posseg.dt.word_tag_tab

    def tag(text: str) -> list[Span]:
        spans = []
        for chunk in re.finditer(r"\S+", text):
            if chunk.group() in dictionary_tags:
                spans.append((chunk.start(), chunk.end(), dictionary_tags[chunk.group()]))
                continue
            position = chunk.start()
            for pair in jieba.posseg.cut(chunk.group()):
                start = text.find(pair.word, position, chunk.end())
                start = position if start < 0 else start
                position = start + len(pair.word)
                if pair.word.strip():
                    spans.append((start, position, pair.flag))
        return spans

    return tag


def spacy_tagger(model_name: str) -> Callable[[str], list[Span]]:
    """spaCy's fine-grained tags (`token.tag_`, PTB for the English models)."""
    try:
        import spacy
    except ImportError as error:
        raise ImportError(f"the 'spacy:{model_name}' tagger needs spaCy: pip install spacy") from error
    nlp = spacy.load(model_name)

    def tag(text: str) -> list[Span]:
        return [(t.idx, t.idx + len(t.text), t.tag_) for t in nlp(text) if not t.is_space]

    return tag


def load_tagger(name: str, nltk_data: str | None = None) -> Callable[[str], list[Span]]:
    if name == "nltk-en":
        return nltk_english_tagger(nltk_data)
    if name == "jieba-zh":
        return jieba_chinese_tagger()
    if name.startswith("spacy:") and len(name) > len("spacy:"):
        return spacy_tagger(name[len("spacy:") :])
    raise ValueError(f"unknown pos_tagger {name!r}: expected 'nltk-en', 'jieba-zh' or 'spacy:<model>'")


# ---------------------------------------------------------------------------------------------------------
# Projection onto sub-word tokens
# ---------------------------------------------------------------------------------------------------------


class RawTextTagger:
    """Raw text + its fast-tokenizer encoding -> `pos_tag_ids` [batch, tokens] (see the module docstring)."""

    def __init__(self, tagger_name: str, tags: list[str], nltk_data: str | None = None):
        self.tagger_name = tagger_name
        self.tag_to_id = tag_to_id_map(list(tags))
        self.unknown_tags: Counter = Counter()  # tagger output outside the vocabulary -> <unk>, counted here
        self._tag_text = load_tagger(tagger_name, nltk_data)

    def tag_ids_of_spans(self, spans: list[Span]) -> list[int]:
        ids = []
        for _, _, tag in spans:
            tag_id = None if tag in SPECIAL_TAG_NAMES else self.tag_to_id.get(tag)
            if tag_id is None:
                self.unknown_tags[tag] += 1
                tag_id = UNK_TAG_ID
            ids.append(tag_id)
        return ids

    def token_tag_ids(self, texts: list[str], encoded) -> torch.LongTensor:
        """`encoded` is the fast tokenizer's BatchEncoding of `texts` (padded to one length)."""
        encodings = getattr(encoded, "encodings", None)
        if not encodings:
            raise ValueError("POS tagging raw text needs a fast tokenizer (character offsets and word_ids())")
        if len(encodings) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(encodings)} encodings")
        rows = []
        for text, encoding in zip(texts, encodings):
            spans = self._tag_text(text)
            span_ids, starts = self.tag_ids_of_spans(spans), [start for start, _, _ in spans]
            row = []
            for (start, _), word, is_pad in zip(encoding.offsets, encoding.word_ids, padding_flags(encoding)):
                if is_pad:
                    row.append(PAD_TAG_ID)
                    continue
                if word is None:
                    row.append(SPECIAL_TAG_ID)
                    continue
                char = first_non_space(text, start)
                index = bisect.bisect_right(starts, char) - 1 if char is not None else -1
                if index >= 0 and char < spans[index][1]:
                    row.append(span_ids[index])
                else:  # a character no tagged word covers
                    self.unknown_tags["<untagged>"] += 1
                    row.append(UNK_TAG_ID)
            rows.append(row)
        return torch.tensor(rows, dtype=torch.long)


def padding_flags(encoding) -> list[bool]:
    return [mask == 0 for mask in encoding.attention_mask]


def first_non_space(text: str, start: int) -> int | None:
    match = re.compile(r"\S").search(text, start)
    return match.start() if match else None


__all__ = ["RawTextTagger", "load_tagger", "tag_to_id_map"]
