"""POS tags for raw source text inside a saved model (the translation pipeline of the mvPE + POS family).

`RawTextTagger(tagger_name, tags, nltk_data)` tags raw text with a real tagger and projects the word tags onto
the sub-word tokens of a fast tokenizer, returning the `pos_tag_ids` the model expects (Eq. 11):

* taggers: "nltk-en" (NLTK's averaged-perceptron PTB tagger on whitespace-separated words, as `xlpe-prepare`),
  "jieba-zh" (dictionary tag of a pre-segmented word, else jieba's segmentation + tags), "spacy:<model>"
  (spaCy's fine-grained `tag_`, when spaCy is installed), "perceptron:<file>" (an averaged-perceptron tagger
  trained by `xlpe-tagger train`, e.g. on a UD treebank, for a language with no built-in tagger; on whitespace
  words). A saved model keeps that file beside its weights as `pos_tagger.json` (`SAVED_TAGGER_FILE`), and a
  relative file name is looked up in the model's own directory or Hub repo (`resolve_tagger_file`);
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
import json
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
    return {
        **{name: index for index, name in enumerate(SPECIAL_TAG_NAMES)},
        **{tag: len(SPECIAL_TAG_NAMES) + i for i, tag in enumerate(tags)},
    }


# ---------------------------------------------------------------------------------------------------------
# Taggers: text -> tagged character spans
# ---------------------------------------------------------------------------------------------------------


def whitespace_word_tagger(tag_words: Callable[[list[str]], list[str]]) -> Callable[[str], list[Span]]:
    """Text -> spans of its whitespace-separated words, tagged by `tag_words` (a list of words -> their tags)."""

    def tag(text: str) -> list[Span]:
        words = [(match.start(), match.end(), match.group()) for match in re.finditer(r"\S+", text)]
        tags = tag_words([word for _, _, word in words]) if words else []
        return [(start, end, word_tag) for (start, end, _), word_tag in zip(words, tags)]

    return tag


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
    return whitespace_word_tagger(lambda words: [word_tag for _, word_tag in tagger.tag(words)])


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


# ---------------------------------------------------------------------------------------------------------
# Trained tagger files: "perceptron:<file>" (written by `xlpe-tagger train`)
# ---------------------------------------------------------------------------------------------------------

PERCEPTRON_PREFIX = "perceptron:"
TAGGER_FILE_FORMAT = "xlpe-averaged-perceptron-tagger"  # the "format" field of a tagger file (version 1)
SAVED_TAGGER_FILE = "pos_tagger.json"  # the tagger file's name inside a saved model


def tagger_file_name(name: str | None) -> str | None:
    """The file of a "perceptron:<file>" tagger name, else None."""
    if isinstance(name, str) and name.startswith(PERCEPTRON_PREFIX):
        return name[len(PERCEPTRON_PREFIX) :]
    return None


def resolve_tagger_file(path: str, model_dir: str | None = None) -> str:
    """The tagger file `path` as given when it exists; else the file of that name in `model_dir` (a saved
    model's directory or Hub repo id, `config._name_or_path`). FileNotFoundError naming both otherwise."""
    if not path:
        raise ValueError("pos_tagger 'perceptron:<file>' needs a file name after 'perceptron:'")
    if os.path.isfile(path):
        return path
    if model_dir:
        local = os.path.join(model_dir, path)
        if os.path.isfile(local):
            return local
        if not os.path.isdir(model_dir):  # a Hub repo: the file beside its weights
            try:
                from transformers.utils import cached_file

                found = cached_file(model_dir, path, _raise_exceptions_for_missing_entries=False)
            except (OSError, ValueError):
                found = None
            if found:
                return found
    where = f" nor in the model at {model_dir!r}" if model_dir else ""
    raise FileNotFoundError(f"POS tagger file {path!r} not found (as a path{where})")


def read_tagger_file(path: str) -> dict:
    """The contents of a tagger file, checked: format, tags (list of distinct strings), weights, tagdict."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a tagger file (invalid JSON at line {error.lineno}: {error.msg})") from None
    if not isinstance(data, dict) or data.get("format") != TAGGER_FILE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: not a tagger file (format {found!r}, expected {TAGGER_FILE_FORMAT!r})")
    if data.get("version") != 1:
        raise ValueError(f"{path}: tagger file version {data.get('version')!r}, this xlpe reads version 1")
    tags = data.get("tags")
    if (
        not isinstance(tags, list)
        or not tags
        or not all(isinstance(t, str) and t for t in tags)
        or len(set(tags)) != len(tags)
    ):
        raise ValueError(f"{path}: 'tags' must be a non-empty list of distinct strings")
    if not isinstance(data.get("weights"), dict) or not isinstance(data.get("tagdict"), dict):
        raise ValueError(f"{path}: 'weights' and 'tagdict' must be JSON objects")
    return data


def perceptron_from_file(data: dict):
    """An NLTK `PerceptronTagger` holding the weights of a tagger file (`read_tagger_file`'s dict)."""
    try:
        from nltk.tag.perceptron import PerceptronTagger
    except ImportError as error:
        raise ImportError("a 'perceptron:<file>' tagger needs nltk: pip install nltk") from error
    tagger = PerceptronTagger(load=False)
    tagger.model.weights, tagger.tagdict = data["weights"], data["tagdict"]
    tagger.classes = tagger.model.classes = set(data["tags"])
    return tagger


def perceptron_word_tags(data: dict) -> Callable[[list[str]], list[str]]:
    """Words -> their tags by a tagger file's perceptron (`read_tagger_file`'s dict); the words are lowercased
    first when the tagger was trained on lowercased text."""
    tagger, lowercase = perceptron_from_file(data), bool(data.get("lowercase"))
    return lambda words: [t for _, t in tagger.tag([w.lower() for w in words] if lowercase else list(words))]


def perceptron_file_tagger(path: str, model_dir: str | None = None) -> Callable[[str], list[Span]]:
    """A trained tagger file's tags over the whitespace-separated words of the text."""
    return whitespace_word_tagger(perceptron_word_tags(read_tagger_file(resolve_tagger_file(path, model_dir))))


def load_tagger(name: str, nltk_data: str | None = None, model_dir: str | None = None) -> Callable[[str], list[Span]]:
    """A raw-text tagger by name; `model_dir` is where a "perceptron:<file>" name may point into."""
    if name == "nltk-en":
        return nltk_english_tagger(nltk_data)
    if name == "jieba-zh":
        return jieba_chinese_tagger()
    if name.startswith("spacy:") and len(name) > len("spacy:"):
        return spacy_tagger(name[len("spacy:") :])
    if tagger_file_name(name) is not None:
        return perceptron_file_tagger(tagger_file_name(name), model_dir)
    raise ValueError(
        f"unknown pos_tagger {name!r}: expected 'nltk-en', 'jieba-zh', 'spacy:<model>' or 'perceptron:<file>'"
    )


# ---------------------------------------------------------------------------------------------------------
# Projection onto sub-word tokens
# ---------------------------------------------------------------------------------------------------------


class RawTextTagger:
    """Raw text + its fast-tokenizer encoding -> `pos_tag_ids` [batch, tokens] (see the module docstring)."""

    def __init__(self, tagger_name: str, tags: list[str], nltk_data: str | None = None, model_dir: str | None = None):
        self.tagger_name = tagger_name
        self.tag_to_id = tag_to_id_map(list(tags))
        self.unknown_tags: Counter = Counter()  # tagger output outside the vocabulary -> <unk>, counted here
        self._tag_text = load_tagger(tagger_name, nltk_data, model_dir)

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


__all__ = [
    "PERCEPTRON_PREFIX",
    "SAVED_TAGGER_FILE",
    "TAGGER_FILE_FORMAT",
    "RawTextTagger",
    "load_tagger",
    "perceptron_from_file",
    "perceptron_word_tags",
    "read_tagger_file",
    "resolve_tagger_file",
    "tag_to_id_map",
    "tagger_file_name",
]
