"""The built-in corpus: English-like SVO sentences and their translation into a synthetic SOV language.

`xlpe-train` with no data arguments trains on this corpus, so the README's main command needs no network.
The target language ("sov") has the word-order divergences that cross-lingual position encodings are for:

    source  S V [IO] O [PP] [ADV]                 the big dog gave the child a red ball in the park yesterday
    target  [ADV] S ga [PP] [IO ni] O o V         kinou ookii inu ga kouen de kodomo ni akai tama o ageta

* the verb goes to the end and time adverbs to the front (long-distance moves);
* case particles mark the roles (ga subject, o object, ni indirect object): they have no source word;
* prepositions become postpositions after their noun (in the park -> kouen de);
* relative clauses precede their noun (the dog that chases the cat -> neko o ou inu);
* articles are dropped (unaligned source words); "my" becomes two words "watashi no" (one-to-many links).

The generator builds the two sentences from one derivation, so the word alignment is exact: it is returned
in Pharaoh format ("i-j", 0-based source word i, target word j). Everything is deterministic in the seed.

    sources, targets, alignments = generate_corpus(1000, seed=0)
    splits = synthetic_splits()   # {"train": [...], "validation": [...], "test": [...]} of SyntheticPair
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .tagging import Tagger, TagVocabulary

SOURCE_LANG, TARGET_LANG = "en", "sov"
DEFAULT_SPLIT_SIZES = {"train": 6000, "validation": 200, "test": 300}

# ---------------------------------------------------------------------------------------------------------
# Lexicon: source word -> target word (verbs: (present, past) in both languages)
# ---------------------------------------------------------------------------------------------------------

NOUNS = {
    "dog": "inu",
    "cat": "neko",
    "bird": "tori",
    "fish": "sakana",
    "man": "otoko",
    "woman": "onna",
    "child": "kodomo",
    "teacher": "sensei",
    "student": "gakusei",
    "doctor": "isha",
    "farmer": "nouka",
    "king": "oosama",
    "book": "hon",
    "apple": "ringo",
    "ball": "tama",
    "letter": "tegami",
    "car": "kuruma",
    "flower": "hana",
    "bag": "kaban",
    "key": "kagi",
    "cake": "keeki",
    "picture": "e",
}
PLACES = {"park": "kouen", "garden": "niwa", "house": "ie", "school": "gakkou", "city": "machi", "river": "kawa"}
ADJECTIVES = {
    "big": "ookii",
    "small": "chiisai",
    "red": "akai",
    "old": "furui",
    "new": "atarashii",
    "black": "kuroi",
    "white": "shiroi",
    "happy": "ureshii",
}
TRANSITIVE = {
    ("sees", "saw"): ("miru", "mita"),
    ("chases", "chased"): ("ou", "otta"),
    ("likes", "liked"): ("konomu", "kononda"),
    ("finds", "found"): ("mitsukeru", "mitsuketa"),
    ("helps", "helped"): ("tasukeru", "tasuketa"),
    ("carries", "carried"): ("hakobu", "hakonda"),
    ("paints", "painted"): ("kaku", "kaita"),
    ("follows", "followed"): ("tsuzuku", "tsuzuita"),
}
DITRANSITIVE = {
    ("gives", "gave"): ("ageru", "ageta"),
    ("sends", "sent"): ("okuru", "okutta"),
    ("shows", "showed"): ("miseru", "miseta"),
}
INTRANSITIVE = {
    ("sleeps", "slept"): ("neru", "neta"),
    ("runs", "ran"): ("hashiru", "hashitta"),
    ("sings", "sang"): ("utau", "utatta"),
    ("waits", "waited"): ("matsu", "matta"),
}
PREPOSITIONS = {"in": "de", "near": "no chikaku de", "behind": "no ushiro de"}
ADVERBS = {"today": "kyou", "yesterday": "kinou", "often": "yoku"}
PARTICLE = {"subject": "ga", "object": "o", "indirect": "ni"}
SUBJECT_NOUNS = [
    n
    for n in NOUNS
    if n in {"dog", "cat", "bird", "man", "woman", "child", "teacher", "student", "doctor", "farmer", "king"}
]


@dataclass
class SyntheticPair:
    source: str
    target: str
    alignment: str  # Pharaoh "i-j" links, 0-based, sorted by (i, j)
    source_pos: list[str]  # universal POS tag of every source word
    target_pos: list[str]  # universal POS tag of every target word


# ---------------------------------------------------------------------------------------------------------
# Grammar. A phrase is two word lists built from one derivation: source words carry an id; a target word
# carries the id of the source word it translates (None: no source word, e.g. a case particle).
# ---------------------------------------------------------------------------------------------------------


class _Derivation:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.next_id = 0

    def word(self, source: str, target: str | None, pos: str):
        """One source word and its translation (several target words allowed, e.g. "no chikaku de")."""
        word_id = self.next_id
        self.next_id += 1
        target_words = [] if target is None else [(t, word_id, None) for t in target.split()]
        return [(source, word_id, pos)], target_words

    def noun_phrase(self, nouns: dict[str, str] | list[str], depth: int):
        rng = self.rng
        noun = rng.choice(list(nouns))
        source, target = [], []
        determiner = rng.choices(["the", "a", "this", "my"], weights=[5, 3, 1, 1])[0]
        det_target = {"the": None, "a": None, "this": "kono", "my": "watashi no"}[determiner]
        s, t = self.word(determiner, det_target, "DET" if determiner != "my" else "PRON")
        source += s
        target += t
        adjective_source, adjective_target = [], []
        for adjective in rng.sample(list(ADJECTIVES), k=rng.choices([0, 1, 2], weights=[5, 4, 1])[0]):
            s, t = self.word(adjective, ADJECTIVES[adjective], "ADJ")
            adjective_source += s
            adjective_target += t
        s, t = self.word(noun, (NOUNS | PLACES)[noun], "NOUN")
        source += adjective_source + s
        if determiner == "a" and source[1][0][0] in "aeiou":  # "a old" -> "an old"
            source[0] = ("an", *source[0][1:])
        if depth < 1 and rng.random() < 0.15:  # relative clause: "that V O" -> "O o V" before the noun
            that_source, _ = self.word("that", None, "PRON")
            verb_source, verb_target = self._verb(TRANSITIVE, tense=rng.random() < 0.5)
            object_source, object_target = self.noun_phrase(NOUNS, depth + 1)
            source += that_source + verb_source + object_source
            target += object_target + self._particle("object") + verb_target
        target += adjective_target + t
        return source, target

    def _verb(self, table: dict, tense: bool):
        (present, past), (target_present, target_past) = self.rng.choice(list(table.items()))
        return self.word(past if tense else present, target_past if tense else target_present, "VERB")

    @staticmethod
    def _particle(role: str):
        return [(PARTICLE[role], None, "PART")]

    def sentence(self):
        rng = self.rng
        past = rng.random() < 0.5
        kind = rng.choices(["intransitive", "transitive", "ditransitive"], weights=[2, 5, 2])[0]
        subject_source, subject_target = self.noun_phrase(SUBJECT_NOUNS, depth=0)
        table = {"intransitive": INTRANSITIVE, "transitive": TRANSITIVE, "ditransitive": DITRANSITIVE}[kind]
        verb_source, verb_target = self._verb(table, past)
        source = subject_source + verb_source
        middle_target = []
        if kind == "ditransitive":
            indirect_source, indirect_target = self.noun_phrase(SUBJECT_NOUNS, depth=1)
            object_source, object_target = self.noun_phrase(NOUNS, depth=1)
            source += indirect_source + object_source
            middle_target = indirect_target + self._particle("indirect") + object_target + self._particle("object")
        elif kind == "transitive":
            object_source, object_target = self.noun_phrase(NOUNS, depth=0)
            source += object_source
            middle_target = object_target + self._particle("object")
        place_target = []
        if rng.random() < 0.35:  # "in the park" -> "kouen de"
            preposition = rng.choice(list(PREPOSITIONS))
            prep_source, prep_target = self.word(preposition, PREPOSITIONS[preposition], "ADP")
            place_source, place_target = self.noun_phrase(PLACES, depth=1)
            source += prep_source + place_source
            place_target = place_target + prep_target
        adverb_source, adverb_target = [], []
        if rng.random() < 0.3:
            adverb = rng.choice(list(ADVERBS))
            adverb_source, adverb_target = self.word(adverb, ADVERBS[adverb], "ADV")
        source += adverb_source
        target = adverb_target + subject_target + self._particle("subject") + place_target + middle_target + verb_target
        return source, target


def _to_pair(source, target) -> SyntheticPair:
    index_of = {word_id: i for i, (_, word_id, _) in enumerate(source)}
    links = sorted((index_of[word_id], j) for j, (_, word_id, _) in enumerate(target) if word_id is not None)
    return SyntheticPair(
        source=" ".join(w for w, _, _ in source),
        target=" ".join(w for w, _, _ in target),
        alignment=" ".join(f"{i}-{j}" for i, j in links),
        source_pos=[p for _, _, p in source],
        target_pos=[_LEXICON_TAGS[w] for w, _, _ in target],  # the target words' own tags ("no" is PART)
    )


# ---------------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------------


def generate_pairs(num_pairs: int, seed: int = 0, exclude: set[str] | None = None) -> list[SyntheticPair]:
    """`num_pairs` distinct sentence pairs (distinct sources, none in `exclude`), deterministic in `seed`."""
    if num_pairs < 0:
        raise ValueError(f"num_pairs must be >= 0, got {num_pairs}")
    rng = random.Random(seed)
    seen = set(exclude or ())
    pairs: list[SyntheticPair] = []
    attempts = 0
    while len(pairs) < num_pairs:
        attempts += 1
        if attempts > 50 * num_pairs + 1000:
            raise RuntimeError(f"the grammar ran out of distinct sentences after {len(pairs)} pairs")
        pair = _to_pair(*_Derivation(rng).sentence())
        if pair.source not in seen:
            seen.add(pair.source)
            pairs.append(pair)
    return pairs


def generate_corpus(num_pairs: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """(sources, targets, Pharaoh alignments) of `num_pairs` distinct pairs."""
    pairs = generate_pairs(num_pairs, seed)
    return [p.source for p in pairs], [p.target for p in pairs], [p.alignment for p in pairs]


def synthetic_splits(sizes: dict[str, int] | None = None, seed: int = 0) -> dict[str, list[SyntheticPair]]:
    """Disjoint train/validation/test splits (no source sentence occurs in two splits)."""
    sizes = {**DEFAULT_SPLIT_SIZES, **(sizes or {})}
    splits: dict[str, list[SyntheticPair]] = {}
    used: set[str] = set()
    for offset, name in enumerate(("test", "validation", "train")):  # held-out splits first: train avoids them
        splits[name] = generate_pairs(sizes[name], seed=seed * 1000 + offset, exclude=used)
        used.update(p.source for p in splits[name])
    return {name: splits[name] for name in ("train", "validation", "test")}


def synthetic_dataset_dict(sizes: dict[str, int] | None = None, seed: int = 0):
    """The splits as a `datasets.DatasetDict` with run_translation's layout: a "translation" column
    {"en": ..., "sov": ...}, plus "alignment" (Pharaoh) and the gold POS tags of both sides."""
    from datasets import Dataset, DatasetDict

    def columns(pairs: list[SyntheticPair]) -> dict[str, list]:
        return {
            "translation": [{SOURCE_LANG: p.source, TARGET_LANG: p.target} for p in pairs],
            "alignment": [p.alignment for p in pairs],
            "source_pos": [p.source_pos for p in pairs],
            "target_pos": [p.target_pos for p in pairs],
        }

    return DatasetDict(
        {name: Dataset.from_dict(columns(pairs)) for name, pairs in synthetic_splits(sizes, seed).items()}
    )


UNIVERSAL_TAGS = ("ADJ", "ADP", "ADV", "DET", "NOUN", "PART", "PRON", "VERB")


def _lexicon_tags() -> dict[str, str]:
    """Every word of both languages -> its universal POS tag (the grammar's, so it is exact)."""
    tags = {
        "the": "DET",
        "a": "DET",
        "an": "DET",
        "this": "DET",
        "my": "PRON",
        "that": "PRON",
        "kono": "DET",
        "watashi": "PRON",
        "no": "PART",
        "chikaku": "NOUN",
        "ushiro": "NOUN",
        **{p: "PART" for p in PARTICLE.values()},
    }
    for table, tag in ((NOUNS, "NOUN"), (PLACES, "NOUN"), (ADJECTIVES, "ADJ"), (ADVERBS, "ADV")):
        tags.update({word: tag for pair in table.items() for word in pair})
    for table in (TRANSITIVE, DITRANSITIVE, INTRANSITIVE):
        tags.update({word: "VERB" for forms in table.items() for pair in forms for word in pair})
    tags.update({word: "ADP" for word in PREPOSITIONS} | {"de": "ADP"})
    return tags


_LEXICON_TAGS = _lexicon_tags()


class SyntheticTagger(Tagger):
    """An `xlpe.features.tagging.Tagger` for both languages of this corpus: universal tags from the lexicon (exact)."""

    name = "synthetic"

    def __init__(self):
        self.vocabulary = TagVocabulary(UNIVERSAL_TAGS)

    def tag(self, sentences):
        return [[_LEXICON_TAGS.get(word, "X") for word in words] for words in sentences]


__all__ = [
    "DEFAULT_SPLIT_SIZES",
    "SOURCE_LANG",
    "TARGET_LANG",
    "UNIVERSAL_TAGS",
    "SyntheticPair",
    "SyntheticTagger",
    "generate_corpus",
    "generate_pairs",
    "synthetic_dataset_dict",
    "synthetic_splits",
]
