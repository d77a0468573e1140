"""POS tags for raw source text inside a saved model (the translation pipeline of every family with tags).

`RawTextTagger(tagger_name, tags, nltk_data, model_dir)` tags raw text with a tagger of the registry
(taggers.py: "nltk-en", "jieba-zh", "spacy:<model>", "perceptron:<file>", and any tagger registered with
`register_tagger`; the same implementation preparation runs) and projects the word tags onto the sub-word tokens
of a fast tokenizer, returning the `pos_tag_ids` the model expects (Eq. 11):

* taggers: `load_tagger(name, nltk_data, model_dir)` is the registry's `tag_text` of the tagger (raw text ->
  (start, end, tag) spans). A trained tagger file travels with the model as `pos_tagger.json`
  (`SAVED_TAGGER_FILE`), and a relative file name is looked up in the model's own directory or Hub repo
  (`resolve_tagger_file`);
* ids: 0 = "<pad>", 1 = "<unk>", 2 = "<special>", then the model's tags in config order, the same convention as
  `xlpe.features.tagging.TagVocabulary`. A tag the vocabulary lacks becomes 1 and is counted in `unknown_tags`;
* projection: a token takes the tag of the tagged word that contains its first non-space character (found from
  the token's character offsets, so a whitespace piece such as Metaspace's lone "▁" takes the next word's
  tag); tokens with no word (`word_ids()` None: </s>, <s>) get "<special>", padding gets "<pad>".

This file travels as Hub custom code with the modeling files: it imports only the standard library, its siblings
and (inside `token_tag_ids`) torch; taggers.py imports nltk, jieba and spaCy inside functions, so a saved model
loads where they are missing; only tagging then fails, with an error that says what to install.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Callable

from .tag_sets import PAD_TAG_ID, SPECIAL_TAG_ID, SPECIAL_TAG_NAMES, UNK_TAG_ID  # noqa: F401
from .taggers import (  # noqa: F401  (the tagger-file helpers, re-exported: saved models and xlpe import them here)
    NLTK_DATA_ENV,
    PERCEPTRON_PREFIX,
    SAVED_TAGGER_FILE,
    TAGGER_FILE_FORMAT,
    Span,
    load_word_tagger,
    perceptron_from_file,
    perceptron_word_tags,
    read_tagger_file,
    resolve_tagger_file,
    tagger_file_name,
)


def tag_to_id_map(tags: list[str]) -> dict[str, int]:
    """{"<pad>": 0, "<unk>": 1, "<special>": 2, tags[0]: 3, ...}."""
    return {
        **{name: index for index, name in enumerate(SPECIAL_TAG_NAMES)},
        **{tag: len(SPECIAL_TAG_NAMES) + i for i, tag in enumerate(tags)},
    }


# ---------------------------------------------------------------------------------------------------------
# Taggers: text -> tagged character spans (the registry's, taggers.py)
# ---------------------------------------------------------------------------------------------------------


def load_tagger(name: str, nltk_data: str | None = None, model_dir: str | None = None) -> Callable[[str], list[Span]]:
    """The raw-text tagging of the registered tagger `name` (text -> spans); `model_dir` is where a
    "perceptron:<file>" name may point into. ValueError naming the registered taggers for an unknown name."""
    return load_word_tagger(name, nltk_data=nltk_data, model_dir=model_dir).tag_text


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

    def token_tag_ids(self, texts: list[str], encoded) -> torch.LongTensor:  # noqa: F821
        """`encoded` is the fast tokenizer's BatchEncoding of `texts` (padded to one length)."""
        import torch

        return torch.tensor(self.token_tag_rows(texts, encoded), dtype=torch.long)

    def token_tag_rows(self, texts: list[str], encoded) -> list[list[int]]:
        """`token_tag_ids` as lists (no torch: the ONNX runtime's front end); `encoded` has the tokenizers
        `Encoding` of each text as `encoded.encodings`."""
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
        return rows


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
