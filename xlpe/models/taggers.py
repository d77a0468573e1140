"""The POS tagger registry: every tagger of xlpe once, read by every layer.

A tagger is registered once, by name, with one implementation that preparation (`xlpe-prepare`, `xlpe-train`:
xlpe/features/tagging.py is a thin adapter over this registry) and a saved model's translation pipeline
(pos_tagging_hub.RawTextTagger, the projection onto sub-word tokens) both run:

* `WordTagger`: the loaded tagger. `tag_words(words)` gives one tag per whitespace word (pre-split training text);
  `tag_text(text)` gives (start, end, tag) character spans of raw text (default: the whitespace words, tagged by
  `tag_words`; a tagger that segments text itself, e.g. jieba, overrides it); `tags` is its tag set (the ids
  3.. of a model's tag vocabulary, in order), or None when the registration fixes it;
* `register_tagger(name, factory, tags=..., languages=..., description=..., argument=..., requires=...)`: the one
  registration. `factory(argument, **options)` builds the `WordTagger` (a `WordTagger` subclass is such a
  factory); `argument` (e.g. "<model>") makes the name a family "name:<model>"; options are `nltk_data` and
  `model_dir` (a saved model's directory, for files that travel with it) and whatever a caller adds: take what
  you use, ignore the rest (`**options`);
* readers: `load_word_tagger(spec, **options)`, `builtin_tags(spec)` (a config's `pos_tags=None` default),
  `tagger_choices()` / `tagger_help()` (CLI help and error texts), `registered_taggers()`.

Built in: "nltk-en" (NLTK's averaged-perceptron PTB tagger, English), "jieba-zh" (jieba, Chinese),
"spacy:<model>" (spaCy's fine-grained `tag_`), "perceptron:<file>" (an averaged perceptron trained by
`xlpe-tagger train`, any language; a saved model keeps the file beside its weights as pos_tagger.json).

A tagger registered at run time is usable by preparation and by every model's pipeline in that process. A
saved model names its tagger in `config.pos_tagger` and stores its tag set in `config.pos_tags`, so the config
loads anywhere; its pipeline needs the tagger registered in the process that runs it: a built-in one (this file
travels with the model), one whose module was imported before tagging, or one of an installed package that
names its registering module as an entry point of the group "xlpe.taggers" (`load_plugin_taggers`, run when a
name is not found and when the names are listed). CONTRIBUTING.md, "Adding a POS tagger", is the recipe.

This file travels as Hub custom code with the modeling files: it imports only the standard library at module
level and its sibling tag_sets.py; nltk, jieba and spaCy are imported inside functions, in `try` blocks, so a
saved model loads where they are missing (only tagging then fails, with an error that says what to install).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .tag_sets import JIEBA_TAGS, PTB_TAGS, SPECIAL_TAG_NAMES

Span = tuple[int, int, str]  # (start char, end char, tag) of one tagged word

NLTK_DATA_ENV = ("XLPE_NLTK_DATA", "NLTK_DATA")  # extra nltk data directories, besides the nltk_data option

# ---------------------------------------------------------------------------------------------------------
# The tagger interface and the registry
# ---------------------------------------------------------------------------------------------------------


class WordTagger:
    """A loaded tagger (module docstring). Subclasses implement `tag_words`, and `tag_text` when the tagger
    segments raw text itself; `tags` (a class attribute or set in `__init__`) is the tag set, None: the one
    given at registration. The constructor takes the name's argument and the options (ignore what you don't use).
    """

    tags: Sequence[str] | None = None
    name: str = ""  # the full tagger name it was loaded by (set by `load_word_tagger`)

    def __init__(self, argument: str | None = None, **options):
        self.argument = argument

    def tag_words(self, words: list[str]) -> list[str]:  # pragma: no cover - interface
        """One tag per word of `words` (whitespace words of pre-split text)."""
        raise NotImplementedError

    def tag_batch(self, sentences: Sequence[Sequence[str]]) -> list[list[str]]:
        """`tag_words` of each pre-split sentence (an empty one: no tags); override to batch (spaCy does)."""
        return [self.tag_words(list(words)) if words else [] for words in sentences]

    def tag_text(self, text: str) -> list[Span]:
        """(start, end, tag) of the words of raw `text`: by default its whitespace words, tagged by `tag_words`."""
        words = [(match.start(), match.end(), match.group()) for match in re.finditer(r"\S+", text)]
        tags = self.tag_words([word for _, _, word in words]) if words else []
        return [(start, end, word_tag) for (start, end, _), word_tag in zip(words, tags)]


@dataclass(frozen=True)
class TaggerEntry:
    """One registered tagger: `name` (with `argument`, a family "name:<argument>"), how to build it, its tag set
    (None: the loaded tagger's own), the languages it tags, a one-line description and the pip package it needs."""

    name: str
    factory: Callable[..., WordTagger]
    tags: tuple[str, ...] | None = None
    languages: tuple[str, ...] = ()
    description: str = ""
    argument: str | None = None
    requires: str | None = None

    @property
    def usage(self) -> str:
        """How the name is written: "nltk-en", "spacy:<model>"."""
        return f"{self.name}:{self.argument}" if self.argument else self.name


_REGISTRY: dict[str, TaggerEntry] = {}


def check_tag_set(tags, what: str = "tags") -> tuple[str, ...]:
    """`tags` as a tuple; ValueError unless a non-empty sequence of distinct non-empty strings, none reserved."""
    if isinstance(tags, str) or not isinstance(tags, Sequence) or not tags:
        raise ValueError(f"{what} must be a non-empty list of distinct tag strings, got {tags!r}")
    if not all(isinstance(t, str) and t for t in tags) or len(set(tags)) != len(tags):
        raise ValueError(f"{what} must be a non-empty list of distinct tag strings, got {tags!r}")
    if set(tags) & set(SPECIAL_TAG_NAMES):
        raise ValueError(f"{what}: the reserved {SPECIAL_TAG_NAMES} are not tags of a tagger")
    return tuple(tags)


def register_tagger(
    name: str,
    factory: Callable[..., WordTagger],
    *,
    tags: Sequence[str] | None = None,
    languages: Sequence[str] = (),
    description: str = "",
    argument: str | None = None,
    requires: str | None = None,
) -> TaggerEntry:
    """Register (or replace) the tagger `name` (module docstring); returns its entry. `tags`: its tag set, when
    fixed (a config's `pos_tags` default; default: the `tags` of a `WordTagger` subclass given as `factory`);
    `argument`: e.g. "<model>", for a family of names "name:<model>"."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError(f"a tagger name is letters, digits, '.', '_', '-' (no ':' or spaces), got {name!r}")
    if not callable(factory):
        raise TypeError(f"the factory of tagger {name!r} must be callable (a WordTagger subclass), got {factory!r}")
    if tags is None and isinstance(factory, type):
        tags = getattr(factory, "tags", None)  # a WordTagger subclass's fixed tag set
    entry = TaggerEntry(
        name=name,
        factory=factory,
        tags=None if tags is None else check_tag_set(tags, f"tags of tagger {name!r}"),
        languages=tuple(languages),
        description=description,
        argument=argument,
        requires=requires,
    )
    _REGISTRY[name] = entry
    return entry


def unregister_tagger(name: str) -> TaggerEntry | None:
    """Remove the tagger `name` (its entry, or None when it was not registered)."""
    return _REGISTRY.pop(name, None)


ENTRY_POINT_GROUP = "xlpe.taggers"  # installed packages' taggers: each entry point is a module that registers
_plugins_loaded = False


def load_plugin_taggers() -> None:
    """Import, once per process, the modules of the installed packages' "xlpe.taggers" entry points (each
    registers its taggers on import; a callable entry point is called): how a fresh process (the CLI, a saved
    model's pipeline) finds a tagger that is not built in. A failing plugin is reported with a warning."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    try:
        from importlib.metadata import entry_points

        found = list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # broken package metadata must not stop the built-in taggers
        return
    for point in found:
        try:
            target = point.load()
            if callable(target) and not isinstance(target, type):
                target()
        except Exception as error:  # a broken plugin must not stop the others
            import warnings

            warnings.warn(f"tagger plugin {point.value!r} ({ENTRY_POINT_GROUP}) failed to load: {error}", stacklevel=2)


def registered_taggers() -> list[TaggerEntry]:
    """All entries, in registration order (the built-in ones first, then the installed plugins')."""
    load_plugin_taggers()
    return list(_REGISTRY.values())


def taggers_for_language(language: str) -> list[str]:
    """The names of the registered taggers that tag `language` (an ISO code: "en" -> ["nltk-en"])."""
    return [entry.usage for entry in registered_taggers() if language in entry.languages]


def tagger_choices() -> list[str]:
    """How each registered tagger is named: ["nltk-en", "jieba-zh", "spacy:<model>", "perceptron:<file>", ...]."""
    return [entry.usage for entry in registered_taggers()]


def tagger_help(separator: str = " | ") -> str:
    """The tagger names for help texts: "nltk-en | jieba-zh | spacy:<model> | perceptron:<file>"."""
    return separator.join(tagger_choices())


def find_tagger(spec: str) -> tuple[TaggerEntry, str | None] | None:
    """(entry, argument) of a tagger name ("nltk-en" -> (nltk-en, None); "spacy:m" -> (spacy, "m")); None if
    unknown (a family's name without an argument, e.g. "spacy:", is unknown too)."""
    if not isinstance(spec, str):
        return None
    if spec not in _REGISTRY and spec.partition(":")[0] not in _REGISTRY:
        load_plugin_taggers()
    entry = _REGISTRY.get(spec)
    if entry is not None and entry.argument is None:
        return entry, None
    prefix, colon, argument = spec.partition(":")
    entry = _REGISTRY.get(prefix) if colon else None
    if entry is not None and entry.argument is not None and argument:
        return entry, argument
    return None


def incomplete_tagger_name(spec) -> str | None:
    """The error text when `spec` is a family's name without its argument ("spacy:"), else None."""
    prefix, colon, rest = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    family = _REGISTRY.get(prefix) if colon and not rest.strip() else None
    if family is not None and family.argument is not None:
        return f"pos_tagger {spec!r} names no {family.argument[1:-1]} after the colon: write {family.usage}"
    return None


def unknown_tagger_message(spec, what: str = "pos_tagger") -> str:
    """The error text of a tagger name the registry does not know: the names it knows."""
    if incomplete_tagger_name(spec):
        return incomplete_tagger_name(spec)
    return (
        f"unknown {what} {spec!r}: expected one of {tagger_help(', ')} (a tagger of your own: "
        "xlpe.models.taggers.register_tagger, in the process that uses it)"
    )


def builtin_tags(spec: str | None) -> tuple[str, ...] | None:
    """The registered tag set of tagger `spec` (a config's `pos_tags=None` default), None when it has none."""
    found = find_tagger(spec) if spec else None
    return found[0].tags if found else None


def load_word_tagger(spec: str, **options) -> WordTagger:
    """The tagger `spec`, loaded (options: `nltk_data`, `model_dir`, ...); ValueError naming the known ones."""
    found = find_tagger(spec)
    if found is None:
        raise ValueError(unknown_tagger_message(spec))
    entry, argument = found
    tagger = entry.factory(argument, **options)
    if getattr(tagger, "tags", None) is None:
        tagger.tags = entry.tags
    tagger.name = spec
    return tagger


# ---------------------------------------------------------------------------------------------------------
# Built-in taggers: NLTK (English), jieba (Chinese), spaCy
# ---------------------------------------------------------------------------------------------------------


class TaggerDataMissing(LookupError, ValueError):
    """A tagger's data files are missing (a LookupError like NLTK's, and a ValueError like other bad settings)."""


class NLTKWordTagger(WordTagger):
    """NLTK's averaged-perceptron PTB tagger (mvPE+POS Table II) over whitespace words. Its model is
    `taggers/averaged_perceptron_tagger_eng` of nltk_data; the `nltk_data` option (a config's `nltk_data`) and
    $XLPE_NLTK_DATA / $NLTK_DATA add directories that are searched first (offline use)."""

    tags = PTB_TAGS

    def __init__(self, argument: str | None = None, nltk_data: str | os.PathLike | None = None, **options):
        super().__init__(argument)
        try:
            import nltk
            from nltk.tag import PerceptronTagger
        except ImportError as error:
            raise ImportError("the 'nltk-en' tagger needs nltk: pip install nltk") from error
        for path in (*(os.environ.get(name) for name in reversed(NLTK_DATA_ENV)), nltk_data):
            if path and str(path) not in nltk.data.path:
                nltk.data.path.insert(0, str(path))
        try:
            self._tagger = PerceptronTagger()
        except LookupError as error:
            raise TaggerDataMissing(
                "NLTK's English POS tagger data is missing (the 'nltk-en' tagger). Install it with\n"
                "    python -c \"import nltk; nltk.download('averaged_perceptron_tagger_eng')\"\n"
                "or point nltk_data= (config.nltk_data, --nltk_data) or $XLPE_NLTK_DATA at an nltk_data directory "
                "that has taggers/averaged_perceptron_tagger_eng/. Searched: " + ", ".join(map(str, nltk.data.path))
            ) from error

    def tag_words(self, words):
        return [word_tag for _, word_tag in self._tagger.tag(list(words))]


class JiebaWordTagger(WordTagger):
    """jieba's tags (mvPE+POS Sec. IV). A pre-segmented word gets its dictionary tag; any other word is cut by
    `jieba.posseg` (HMM on) and takes the tag of its last piece (Chinese compounds are head-final; "x" if none),
    so there is one tag per given word. Raw text: each whitespace chunk that is a dictionary word gets its
    dictionary tag, any other chunk (e.g. a whole raw sentence) is segmented by `jieba.posseg`, each piece
    keeping its own tag."""

    tags = JIEBA_TAGS

    def __init__(self, argument: str | None = None, **options):
        super().__init__(argument)
        try:
            import logging

            import jieba
            import jieba.posseg
        except ImportError as error:
            raise ImportError("the 'jieba-zh' tagger needs jieba: pip install jieba") from error
        jieba.setLogLevel(logging.WARNING)
        self._posseg = jieba.posseg
        self._posseg.dt.initialize()
        self._word_tags = self._posseg.dt.word_tag_tab

    def _tag_word(self, word: str) -> str:
        tag = self._word_tags.get(word)
        if tag is None:
            pieces = [p for p in self._posseg.lcut(word) if p.word.strip()]
            tag = pieces[-1].flag if pieces else "x"
        return tag

    def tag_words(self, words):
        return [self._tag_word(word) for word in words]

    def tag_text(self, text):
        spans = []
        for chunk in re.finditer(r"\S+", text):
            if chunk.group() in self._word_tags:
                spans.append((chunk.start(), chunk.end(), self._word_tags[chunk.group()]))
                continue
            position = chunk.start()
            for pair in self._posseg.cut(chunk.group()):
                start = text.find(pair.word, position, chunk.end())
                start = position if start < 0 else start
                position = start + len(pair.word)
                if pair.word.strip():
                    spans.append((start, position, pair.flag))
        return spans


UNIVERSAL_TAGS = (  # spaCy's coarse `pos_` (UD universal tags)
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


class SpacyWordTagger(WordTagger):
    """Fine-grained tags (`token.tag_`, PTB for the English models; option `attribute="pos_"`: UD universal
    tags) of an installed spaCy model, named by the argument ("spacy:en_core_web_sm"). Pre-split words are
    wrapped in a `Doc` so spaCy does not re-tokenise them; raw text is spaCy's own tokens. The tag set is the
    model's tagger labels, so it is only as stable as the model: a config stores it."""

    def __init__(self, argument: str | None = None, attribute: str = "tag_", **options):
        super().__init__(argument)
        try:
            import spacy
            from spacy.tokens import Doc
        except ImportError as error:
            raise ImportError(f"the 'spacy:{argument}' tagger needs spaCy and the model: pip install spacy") from error
        if attribute not in ("tag_", "pos_"):
            raise ValueError(f"attribute must be 'tag_' or 'pos_', got {attribute!r}")
        self._nlp, self._doc, self._attribute = spacy.load(argument), Doc, attribute
        labels = self._nlp.get_pipe("tagger").labels if "tagger" in self._nlp.pipe_names else ()
        self.tags = tuple(labels) if attribute == "tag_" else UNIVERSAL_TAGS

    def tag_words(self, words):
        return self.tag_batch([words])[0]

    def tag_batch(self, sentences):
        docs = [self._doc(self._nlp.vocab, words=list(words)) for words in sentences]
        return [[getattr(token, self._attribute) for token in doc] for doc in self._nlp.pipe(docs)]

    def tag_text(self, text):
        return [(t.idx, t.idx + len(t.text), getattr(t, self._attribute)) for t in self._nlp(text) if not t.is_space]


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


class PerceptronFileWordTagger(WordTagger):
    """A tagger file written by `xlpe-tagger train` (argument: its path; the `model_dir` option: a saved model
    whose directory or Hub repo holds it under a relative name). Its tags are the file's; whitespace words."""

    def __init__(self, argument: str | None = None, model_dir: str | None = None, **options):
        super().__init__(argument)
        self.path = resolve_tagger_file(argument or "", model_dir)
        self.data = read_tagger_file(self.path)
        self.tags = tuple(self.data["tags"])
        self._tag_words = perceptron_word_tags(self.data)

    def tag_words(self, words):
        return self._tag_words(words)


# ---------------------------------------------------------------------------------------------------------
# The built-in registrations
# ---------------------------------------------------------------------------------------------------------

register_tagger(
    "nltk-en",
    NLTKWordTagger,
    tags=PTB_TAGS,
    languages=("en",),
    description="NLTK's averaged-perceptron tagger, Penn Treebank tags (needs nltk_data)",
    requires="nltk",
)
register_tagger(
    "jieba-zh", JiebaWordTagger, tags=JIEBA_TAGS, languages=("zh",), description="jieba's tags", requires="jieba"
)
register_tagger(
    "spacy", SpacyWordTagger, argument="<model>", description="an installed spaCy model's fine tags", requires="spacy"
)
register_tagger(
    "perceptron",
    PerceptronFileWordTagger,
    argument="<file>",
    description="a tagger file trained by `xlpe-tagger train` (any language)",
    requires="nltk",
)


__all__ = [
    "PERCEPTRON_PREFIX",
    "SAVED_TAGGER_FILE",
    "TAGGER_FILE_FORMAT",
    "UNIVERSAL_TAGS",
    "Span",
    "TaggerDataMissing",
    "TaggerEntry",
    "WordTagger",
    "builtin_tags",
    "ENTRY_POINT_GROUP",
    "find_tagger",
    "incomplete_tagger_name",
    "load_plugin_taggers",
    "load_word_tagger",
    "perceptron_from_file",
    "perceptron_word_tags",
    "read_tagger_file",
    "register_tagger",
    "registered_taggers",
    "resolve_tagger_file",
    "tagger_choices",
    "tagger_file_name",
    "tagger_help",
    "taggers_for_language",
    "unknown_tagger_message",
    "unregister_tagger",
]
