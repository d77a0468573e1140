"""POS taggers behind one interface, and the tag vocabulary stored with a model.

mvPE+POS (Sec. IV, Table I/II) encodes a POS tag per word: Penn Treebank tags from NLTK's averaged-perceptron
tagger for English, jieba's tags for Chinese. Here:

- `TagVocabulary`: ordered tags with reserved ids 0 "<pad>", 1 "<unk>" (a tag the vocabulary lacks; counted),
  2 "<special>" (special tokens such as </s>), then the tags. `to_list()`/`from_list()` round-trip through a
  model config, so ids mean the same at training and inference. `PTB_TAGS` and `JIEBA_TAGS` are built in.
- Taggers, by name: `get_tagger("nltk-en")`, `get_tagger("jieba-zh")`, `get_tagger("spacy:<model>")`,
  `get_tagger("perceptron:<file>")` (a tagger trained by `xlpe-tagger train`, tagger_training.py: how a language
  with no built-in tagger, e.g. German from a UD treebank, gets tags); `register_tagger(name, cls)` adds more.
  `tagger.tag(list_of_word_lists)` tags pre-split words (batched);
  `tagger.tag_sentence(text)` splits raw text itself and returns (words, tags), for inference pipelines.
- `subword_tag_ids`: word-level tag ids -> one id per sub-word token (pieces share their word's tag).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..models.pos_tagging_hub import perceptron_word_tags, read_tagger_file, resolve_tagger_file, tagger_file_name
from ..models.tag_sets import (  # noqa: F401  (re-exported)
    JIEBA_TAGS,
    PAD_TAG,
    PAD_TAG_ID,
    PTB_TAGS,
    SPECIAL_TAG,
    SPECIAL_TAG_ID,
    SPECIAL_TAG_NAMES,
    UNK_TAG,
    UNK_TAG_ID,
)

RESERVED_TAGS = SPECIAL_TAG_NAMES

NLTK_DATA_ENV = "XLPE_NLTK_DATA"  # extra nltk_data directory searched first (NLTK's own NLTK_DATA works too)


# ----------------------------------------------------------------------------------------------------------
# Tag vocabulary
# ----------------------------------------------------------------------------------------------------------


class TagVocabulary:
    """Tag <-> id map with reserved ids 0 <pad>, 1 <unk>, 2 <special>; tags follow in the given order."""

    def __init__(self, tags: Sequence[str]):
        tags = [t for t in tags if t not in RESERVED_TAGS]
        if len(set(tags)) != len(tags):
            duplicates = sorted(t for t, c in Counter(tags).items() if c > 1)
            raise ValueError(f"duplicate tags: {duplicates}")
        self.tags = list(RESERVED_TAGS) + tags
        self.tag_to_id = {tag: i for i, tag in enumerate(self.tags)}
        self.unknown_tags: Counter = Counter()  # tags seen by `encode` that are not in the vocabulary

    def __len__(self) -> int:
        return len(self.tags)

    def __eq__(self, other) -> bool:
        return isinstance(other, TagVocabulary) and self.tags == other.tags

    def __repr__(self) -> str:
        return f"TagVocabulary({len(self.tags) - len(RESERVED_TAGS)} tags + {len(RESERVED_TAGS)} reserved)"

    def to_list(self) -> list[str]:
        """All tags in id order, reserved ones first: store this in the model config."""
        return list(self.tags)

    @classmethod
    def from_list(cls, tags: Sequence[str]) -> TagVocabulary:
        """Inverse of `to_list` (reserved entries must be first and in order, if present)."""
        tags = list(tags)
        if tags[: len(RESERVED_TAGS)] != list(RESERVED_TAGS) and any(t in RESERVED_TAGS for t in tags):
            raise ValueError(f"reserved tags must come first as {list(RESERVED_TAGS)}, got {tags[:3]}")
        return cls(tags)

    def encode(self, tags: Sequence[str]) -> list[int]:
        """Ids of `tags`; a tag outside the vocabulary maps to 1 (<unk>) and is counted in `unknown_tags`."""
        ids = [self.tag_to_id.get(tag, UNK_TAG_ID) for tag in tags]
        if UNK_TAG_ID in ids:
            self.unknown_tags.update(tag for tag, i in zip(tags, ids) if i == UNK_TAG_ID)
        return ids

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.tags[i] for i in ids]


BUILTIN_VOCABULARIES = {"ptb": PTB_TAGS, "jieba": JIEBA_TAGS}


def builtin_vocabulary(name: str) -> TagVocabulary:
    """A fresh `TagVocabulary` of a built-in tag set: "ptb" (English) or "jieba" (Chinese)."""
    if name not in BUILTIN_VOCABULARIES:
        raise ValueError(f"unknown tag set {name!r}; built in: {sorted(BUILTIN_VOCABULARIES)}")
    return TagVocabulary(BUILTIN_VOCABULARIES[name])


def subword_tag_ids(word_tag_ids: Sequence[int], word_ids: Sequence[int | None]) -> list[int]:
    """One tag id per token: each piece gets its word's tag id, special tokens (word id None or -1) get 2."""
    return [SPECIAL_TAG_ID if w is None or w < 0 else word_tag_ids[w] for w in word_ids]


def subword_tag_ids_flat(
    word_tag_ids: np.ndarray, tag_offsets: np.ndarray, word_ids: np.ndarray, token_offsets: np.ndarray
) -> np.ndarray:
    """`subword_tag_ids` for a whole batch, flat: sentence s owns the word tag ids
    `word_tag_ids[tag_offsets[s]:tag_offsets[s + 1]]` and the tokens `token_offsets[s]:token_offsets[s + 1]`
    of `word_ids` (-1 = special token). Returns one tag id per token, flat like `word_ids`."""
    word_tag_ids, tag_offsets = np.asarray(word_tag_ids, np.int64), np.asarray(tag_offsets, np.int64)
    word_ids, token_offsets = np.asarray(word_ids, np.int64), np.asarray(token_offsets, np.int64)
    token_sentence = np.repeat(np.arange(len(token_offsets) - 1, dtype=np.int64), np.diff(token_offsets))
    is_word = word_ids >= 0
    beyond = np.flatnonzero(is_word & (word_ids >= np.diff(tag_offsets)[token_sentence]))
    if len(beyond):
        k = int(beyond[0])
        raise IndexError(f"word id {int(word_ids[k])} but only {int(np.diff(tag_offsets)[token_sentence[k]])} tags")
    result = np.full(len(word_ids), SPECIAL_TAG_ID, dtype=np.int64)
    result[is_word] = word_tag_ids[tag_offsets[token_sentence[is_word]] + word_ids[is_word]]
    return result


# ----------------------------------------------------------------------------------------------------------
# Taggers
# ----------------------------------------------------------------------------------------------------------


class Tagger:
    """Interface: `tag` pre-split sentences (batched), `tag_sentence` raw text; `vocabulary` fixes the ids."""

    name = "tagger"

    def __init__(self):
        self.vocabulary = TagVocabulary([])

    def tag(self, sentences: Sequence[Sequence[str]]) -> list[list[str]]:  # pragma: no cover - interface
        raise NotImplementedError

    def tag_sentence(self, text: str) -> tuple[list[str], list[str]]:
        """Split raw text on whitespace (the word unit of alignments and of `xlpe-prepare`) and tag it."""
        words = text.split()
        return words, self.tag([words])[0]

    def tag_ids(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        return [self.vocabulary.encode(tags) for tags in self.tag(sentences)]


class NLTKPerceptronTagger(Tagger):
    """NLTK's averaged-perceptron English tagger (Penn Treebank tags), as in mvPE+POS Table II.

    The model is `taggers/averaged_perceptron_tagger_eng` of nltk_data (`nltk.download(
    'averaged_perceptron_tagger_eng')`). `nltk_data` (or the env var XLPE_NLTK_DATA) adds a directory that is
    searched first, for offline use (e.g. the project's `../shared/data/nltk_data`).
    """

    name = "nltk-en"

    def __init__(self, nltk_data: str | os.PathLike | None = None):
        import nltk
        from nltk.tag import PerceptronTagger

        for path in (os.environ.get(NLTK_DATA_ENV), nltk_data):
            if path and str(path) not in nltk.data.path:
                nltk.data.path.insert(0, str(path))
        try:
            self._tagger = PerceptronTagger()
        except LookupError as error:
            raise LookupError(
                "NLTK's English POS tagger data is missing. Install it with\n"
                "    python -c \"import nltk; nltk.download('averaged_perceptron_tagger_eng')\"\n"
                f"or point nltk_data= / ${NLTK_DATA_ENV} at an nltk_data directory that has "
                "taggers/averaged_perceptron_tagger_eng/. Searched: " + ", ".join(map(str, nltk.data.path))
            ) from error
        self.vocabulary = builtin_vocabulary("ptb")

    def tag(self, sentences):
        tag = self._tagger.tag
        return [[t for _, t in tag(list(words))] if words else [] for words in sentences]


class JiebaTagger(Tagger):
    """jieba's POS tags for Chinese (mvPE+POS Sec. IV).

    jieba segments text itself. For already-segmented words (the units the alignment and the tokenizer use)
    each word is tagged on its own: a dictionary word gets its dictionary tag; any other word is cut by
    `jieba.posseg` (HMM on) and takes the tag of its last piece (Chinese compounds are head-final), so the
    number of tags always equals the number of words. `tag_sentence(text)` instead lets jieba segment raw
    text (whitespace runs dropped) and returns jieba's words with their tags.
    """

    name = "jieba-zh"

    def __init__(self):
        import jieba
        import jieba.posseg

        jieba.setLogLevel(logging.WARNING)
        self._posseg = jieba.posseg
        self._posseg.dt.initialize()
        self._word_tags = self._posseg.dt.word_tag_tab
        self.vocabulary = builtin_vocabulary("jieba")

    def _tag_word(self, word: str) -> str:
        tag = self._word_tags.get(word)
        if tag is None:
            pieces = [p for p in self._posseg.lcut(word) if p.word.strip()]
            tag = pieces[-1].flag if pieces else "x"
        return tag

    def tag(self, sentences):
        return [[self._tag_word(w) for w in words] for words in sentences]

    def tag_sentence(self, text):
        pairs = [(p.word, p.flag) for p in self._posseg.lcut(text) if p.word.strip()]
        return [w for w, _ in pairs], [t for _, t in pairs]


class SpacyTagger(Tagger):
    """Fine-grained tags (`token.tag_`, or `token.pos_` with `attribute="pos_"`) of an installed spaCy model.

    Pre-split words are wrapped in a `Doc` so spaCy does not re-tokenise them. The vocabulary is the model's
    tagger labels (UD universal tags for `pos_`), so it is only as stable as the model: store `to_list()`.
    """

    UNIVERSAL_TAGS = (
        "ADJ",
        "ADP",
        "ADV",
        "AUX",
        "CCONJ",
        "DET",
        "INTJ",
        "NOUN",
        "NUM",
        "PART",
        "PRON",
        "PROPN",
        "PUNCT",
        "SCONJ",
        "SYM",
        "VERB",
        "X",
        "SPACE",
    )

    def __init__(self, model: str, attribute: str = "tag_"):
        try:
            import spacy
            from spacy.tokens import Doc
        except ImportError as error:
            raise ImportError(f"the spaCy tagger needs spaCy and the model {model!r}: pip install spacy") from error
        if attribute not in ("tag_", "pos_"):
            raise ValueError(f"attribute must be 'tag_' or 'pos_', got {attribute!r}")
        self.name = f"spacy:{model}"
        self._nlp = spacy.load(model)
        self._doc = Doc
        self._attribute = attribute
        labels = self._nlp.get_pipe("tagger").labels if "tagger" in self._nlp.pipe_names else ()
        self.vocabulary = TagVocabulary(labels if attribute == "tag_" else self.UNIVERSAL_TAGS)

    def tag(self, sentences):
        docs = [self._doc(self._nlp.vocab, words=list(words)) for words in sentences]
        return [[getattr(token, self._attribute) for token in doc] for doc in self._nlp.pipe(docs)]

    def tag_sentence(self, text):
        doc = self._nlp(text)
        tokens = [t for t in doc if not t.is_space]
        return [t.text for t in tokens], [getattr(t, self._attribute) for t in tokens]


def tagger_identity(spec: str | None) -> str | None:
    """What names a tagger's output, for cache keys: the name, plus a content digest for a trained tagger file
    (retraining into the same file must not reuse features tagged by the old one)."""
    path = tagger_file_name(spec)
    if path is None or not os.path.isfile(path):
        return spec
    import hashlib

    with open(path, "rb") as handle:
        return f"{spec}@sha256:{hashlib.sha256(handle.read()).hexdigest()[:16]}"


class PerceptronFileTagger(Tagger):
    """An averaged-perceptron tagger trained by `xlpe-tagger train` (tagger_training.py), read from its file;
    the file's tags are the vocabulary. `model_dir`: a saved model that holds the file (its relative name)."""

    def __init__(self, path: str | os.PathLike, model_dir: str | None = None):
        self.path = resolve_tagger_file(str(path), model_dir)
        self.name = tagger_identity(f"perceptron:{self.path}")
        self.data = read_tagger_file(self.path)
        self._tag_words = perceptron_word_tags(self.data)
        self.vocabulary = TagVocabulary(self.data["tags"])

    def tag(self, sentences):
        return [self._tag_words(words) if words else [] for words in sentences]


TAGGERS: dict[str, type[Tagger]] = {"nltk-en": NLTKPerceptronTagger, "jieba-zh": JiebaTagger}


def register_tagger(name: str, tagger_class: type[Tagger]) -> None:
    """Make `get_tagger(name)` build `tagger_class(**kwargs)`."""
    TAGGERS[name] = tagger_class


def get_tagger(spec: str | Tagger, **kwargs) -> Tagger:
    """A tagger by name: "nltk-en" (kwargs: nltk_data), "jieba-zh", "spacy:<model>" (kwargs: attribute),
    "perceptron:<file>" (kwargs: model_dir), or any registered name. A `Tagger` instance is returned as is."""
    if isinstance(spec, Tagger):
        return spec
    if spec.startswith("spacy:"):
        return SpacyTagger(spec.split(":", 1)[1], **kwargs)
    if tagger_file_name(spec) is not None:
        return PerceptronFileTagger(tagger_file_name(spec), **kwargs)
    if spec not in TAGGERS:
        raise ValueError(
            f"unknown tagger {spec!r}; available: {sorted(TAGGERS)}, 'spacy:<model>' or 'perceptron:<file>'"
        )
    return TAGGERS[spec](**kwargs)
