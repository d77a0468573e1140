"""POS taggers for feature preparation: a thin adapter over the one tagger registry, and the tag vocabulary
stored with a model.

mvPE+POS (Sec. IV, Table I/II) encodes a POS tag per word: Penn Treebank tags from NLTK's averaged-perceptron
tagger for English, jieba's tags for Chinese. Every tagger lives once, in the registry of
`xlpe/models/taggers.py` (which travels with a saved model, so its pipeline runs the same implementation).
Here:

- `TagVocabulary`: ordered tags with reserved ids 0 "<pad>", 1 "<unk>" (a tag the vocabulary lacks; counted),
  2 "<special>" (special tokens such as </s>), then the tags. `to_list()`/`from_list()` round-trip through a
  model config, so ids mean the same at training and inference. `builtin_vocabulary("nltk-en")`: a registered
  tagger's tag set.
- Taggers, by name: `get_tagger(name)` for any registered name: "nltk-en", "jieba-zh", "spacy:<model>",
  "perceptron:<file>" (a tagger trained by `xlpe-tagger train`, tagger_training.py: how a language with no
  built-in tagger, e.g. German from a UD treebank, gets tags), and any tagger added with `register_tagger`
  (CONTRIBUTING.md, "Adding a POS tagger"). `tagger.tag(list_of_word_lists)` tags pre-split words (batched);
  `tagger.tag_sentence(text)` tags raw text as a saved model's pipeline does and returns (words, tags).
- `subword_tag_ids`: word-level tag ids -> one id per sub-word token (pieces share their word's tag).
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections import Counter
from collections.abc import MutableMapping, Sequence

import numpy as np

from ..models.pos_tagging_hub import tagger_file_name
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
from ..models.taggers import (
    PERCEPTRON_PREFIX,
    UNIVERSAL_TAGS,
    TaggerEntry,
    WordTagger,
    builtin_tags,
    find_tagger,
    load_word_tagger,
    registered_taggers,
    unknown_tagger_message,
    unregister_tagger,
)
from ..models.taggers import register_tagger as register_models_tagger

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


_TAG_SET_ALIASES = {"ptb": "nltk-en", "jieba": "jieba-zh"}  # the older names of the built-in tag sets


def builtin_vocabulary(name: str) -> TagVocabulary:
    """A fresh `TagVocabulary` of a registered tagger's tag set, e.g. "nltk-en" (PTB), "jieba-zh" (the older
    tag-set names "ptb" and "jieba" still work)."""
    tags = builtin_tags(_TAG_SET_ALIASES.get(name, name))
    if tags is None:
        known = sorted({*_TAG_SET_ALIASES, *(e.name for e in registered_taggers() if e.tags is not None)})
        raise ValueError(f"unknown tag set {name!r}; registered taggers with a tag set: {known}")
    return TagVocabulary(tags)


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
# Taggers: a thin adapter over the tagger registry (xlpe/models/taggers.py)
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


class RegisteredTagger(Tagger):
    """A tagger of the registry, for preparation: the registry's implementation (`WordTagger`) runs `tag` (its
    `tag_batch`) and `tag_sentence` (its `tag_text`, the spans a saved model's pipeline tags raw text into);
    the vocabulary is its tag set. `options` go to the tagger (nltk_data, model_dir, ...)."""

    def __init__(self, spec: str, **options):
        self.word_tagger = load_word_tagger(spec, **options)
        self.name = spec
        self.vocabulary = TagVocabulary(self.word_tagger.tags or ())

    def tag(self, sentences):
        return self.word_tagger.tag_batch(sentences)

    def tag_sentence(self, text):
        spans = self.word_tagger.tag_text(text)
        return [text[start:end] for start, end, _ in spans], [tag for _, _, tag in spans]


class NLTKPerceptronTagger(RegisteredTagger):
    """The "nltk-en" tagger: NLTK's averaged-perceptron English tagger (Penn Treebank tags), mvPE+POS Table II.

    The model is `taggers/averaged_perceptron_tagger_eng` of nltk_data (`nltk.download(
    'averaged_perceptron_tagger_eng')`). `nltk_data` (or the env var XLPE_NLTK_DATA) adds a directory that is
    searched first, for offline use (e.g. the project's `../shared/data/nltk_data`).
    """

    name = "nltk-en"

    def __init__(self, nltk_data: str | os.PathLike | None = None, **options):
        super().__init__("nltk-en", nltk_data=nltk_data, **options)


class JiebaTagger(RegisteredTagger):
    """The "jieba-zh" tagger: jieba's POS tags for Chinese (mvPE+POS Sec. IV; taggers.JiebaWordTagger says how
    words and raw text are tagged: one tag per given word; raw text segmented by jieba)."""

    name = "jieba-zh"

    def __init__(self, **options):
        super().__init__("jieba-zh", **options)


class SpacyTagger(RegisteredTagger):
    """The "spacy:<model>" taggers: fine-grained tags (`token.tag_`, or `token.pos_` with `attribute="pos_"`) of
    an installed spaCy model; the vocabulary is the model's tagger labels (UD universal tags for `pos_`): store
    `to_list()`."""

    UNIVERSAL_TAGS = UNIVERSAL_TAGS

    def __init__(self, model: str, attribute: str = "tag_", **options):
        super().__init__(f"spacy:{model}", attribute=attribute, **options)


def tagger_identity(spec: str | None) -> str | None:
    """What names a tagger's output, for cache keys: the name, plus a content digest for a trained tagger file
    (retraining into the same file must not reuse features tagged by the old one)."""
    path = tagger_file_name(spec)
    if path is None or not os.path.isfile(path):
        return spec
    import hashlib

    with open(path, "rb") as handle:
        return f"{spec}@sha256:{hashlib.sha256(handle.read()).hexdigest()[:16]}"


class PerceptronFileTagger(RegisteredTagger):
    """The "perceptron:<file>" taggers: an averaged-perceptron tagger trained by `xlpe-tagger train`
    (tagger_training.py), read from its file; the file's tags are the vocabulary. `model_dir`: a saved model that
    holds the file."""

    def __init__(self, path: str | os.PathLike, model_dir: str | None = None, **options):
        super().__init__(PERCEPTRON_PREFIX + str(path), model_dir=model_dir, **options)
        self.path, self.data = self.word_tagger.path, self.word_tagger.data
        self.name = tagger_identity(f"perceptron:{self.path}")


# The built-in taggers' preparation classes (kept for `isinstance`); any other registered tagger is a
# `RegisteredTagger`, and a `Tagger` subclass registered directly (`register_tagger(name, TaggerSubclass)`) is itself.
_ADAPTERS: dict[str, type[Tagger]] = {"nltk-en": NLTKPerceptronTagger, "jieba-zh": JiebaTagger}
_TAGGER_CLASSES: dict[str, type[Tagger]] = {}  # registered as `Tagger` subclasses: get_tagger builds them


class _TaggerClassWordTagger(WordTagger):
    """A `Tagger` subclass registered directly, as the registry's `WordTagger` (so a model's pipeline runs it
    too): `tag_words` is its `tag`; raw text is its `tag_sentence`, each word found in the text in order."""

    def __init__(self, tagger: Tagger):
        super().__init__()
        self.tagger, self.tags = tagger, tuple(tagger.vocabulary.tags[len(RESERVED_TAGS) :])

    def tag_words(self, words):
        return self.tagger.tag([list(words)])[0]

    def tag_text(self, text):
        if type(self.tagger).tag_sentence is Tagger.tag_sentence:
            return super().tag_text(text)
        spans, position = [], 0
        for word, word_tag in zip(*self.tagger.tag_sentence(text)):
            start = text.find(word, position)
            start = position if start < 0 else start
            position = start + len(word)
            spans.append((start, position, word_tag))
        return spans


def _accepted_options(tagger_class: type, options: dict) -> dict:
    """The options `tagger_class(**options)` takes (all of them when it takes **kwargs)."""
    accepted = inspect.signature(tagger_class).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return options
    return {key: value for key, value in options.items() if key in accepted}


def _tagger_class_factory(tagger_class: type[Tagger]):
    def build(argument=None, **options):
        return _TaggerClassWordTagger(tagger_class(**_accepted_options(tagger_class, options)))

    return build


def register_tagger(name: str, tagger, **entry) -> TaggerEntry:
    """Register a tagger in the one registry (xlpe.models.taggers.register_tagger: preparation, the CLI help, the
    configs' tag sets and every saved model's pipeline in this process read it). `tagger`: a `WordTagger`
    subclass (or factory) with `entry` fields (tags, languages, description, argument, requires); a `Tagger`
    subclass (the older form) is accepted too: `get_tagger(name)` builds it, a model's pipeline runs its `tag`."""
    if isinstance(tagger, type) and issubclass(tagger, Tagger):
        registered = register_models_tagger(name, _tagger_class_factory(tagger), **entry)
        _TAGGER_CLASSES[name] = tagger
        return registered
    _TAGGER_CLASSES.pop(name, None)
    return register_models_tagger(name, tagger, **entry)


class _TaggerTable(MutableMapping):
    """`TAGGERS`: the registry's taggers by name (without the name families such as spacy:<model>), as the
    preparation classes that `get_tagger` builds; assigning registers a `Tagger` subclass, `pop` unregisters."""

    def __getitem__(self, name):
        found = find_tagger(name)
        if found is None or found[1] is not None:
            raise KeyError(name)
        return _TAGGER_CLASSES.get(name) or _ADAPTERS.get(name) or functools.partial(RegisteredTagger, name)

    def __setitem__(self, name, tagger_class):
        register_tagger(name, tagger_class)

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        unregister_tagger(name)
        _TAGGER_CLASSES.pop(name, None)

    def __iter__(self):
        return iter([entry.name for entry in registered_taggers() if entry.argument is None])

    def __len__(self):
        return len(list(iter(self)))

    def __contains__(self, name):
        return name in list(iter(self))


TAGGERS: MutableMapping[str, type[Tagger]] = _TaggerTable()


def get_tagger(spec: str | Tagger, **kwargs) -> Tagger:
    """A tagger by name: any name of the registry ("nltk-en", "jieba-zh", "spacy:<model>" (kwargs: attribute),
    "perceptron:<file>", or a registered one). The options `nltk_data` and `model_dir` (a checkpoint that may hold
    a tagger file) may be given for any tagger: each takes what it uses. A `Tagger` instance is returned as is."""
    if isinstance(spec, Tagger):
        return spec
    found = find_tagger(spec)
    if found is None:
        raise ValueError(unknown_tagger_message(spec, "tagger"))
    entry, argument = found
    if entry.name in _TAGGER_CLASSES:
        return _TAGGER_CLASSES[entry.name](**_accepted_options(_TAGGER_CLASSES[entry.name], kwargs))
    if entry.name == "perceptron":
        return PerceptronFileTagger(argument, **kwargs)
    if entry.name == "spacy":
        return SpacyTagger(argument, **kwargs)
    if entry.name in _ADAPTERS:
        return _ADAPTERS[entry.name](**kwargs)
    return RegisteredTagger(spec, **kwargs)


def __getattr__(name: str):
    """`BUILTIN_VOCABULARIES` ("ptb", "jieba": a third naming of the tag sets) is deprecated: the tagger registry
    holds each tagger's tag set, `builtin_vocabulary("nltk-en")`."""
    if name == "BUILTIN_VOCABULARIES":
        warnings.warn(
            "xlpe.features.tagging.BUILTIN_VOCABULARIES is deprecated: builtin_vocabulary(tagger name) reads the "
            "tag set from the tagger registry (xlpe.models.taggers)",
            DeprecationWarning,
            stacklevel=2,
        )
        return {alias: builtin_tags(tagger) for alias, tagger in _TAG_SET_ALIASES.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
