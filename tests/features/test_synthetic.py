"""The built-in corpus (xlpe.synthetic): deterministic, disjoint splits, exact alignments, real reordering."""

from __future__ import annotations

import statistics

import pytest

from xlpe.features.reordering import kendall_tau, oracle_xl_positions
from xlpe.features.synthetic import (
    ADJECTIVES,
    ADVERBS,
    NOUNS,
    PARTICLE,
    PLACES,
    SOURCE_LANG,
    TARGET_LANG,
    SyntheticTagger,
    generate_corpus,
    generate_pairs,
    synthetic_dataset_dict,
    synthetic_splits,
)

LEXICON = {**NOUNS, **PLACES, **ADJECTIVES, **ADVERBS}
SIZES = {"train": 400, "validation": 50, "test": 50}


@pytest.fixture(scope="module")
def splits():
    return synthetic_splits(SIZES)


def links(pair):
    return [tuple(map(int, link.split("-"))) for link in pair.alignment.split()]


def test_generation_is_deterministic_in_the_seed():
    assert generate_corpus(50, seed=3) == generate_corpus(50, seed=3)
    assert generate_corpus(50, seed=3) != generate_corpus(50, seed=4)


def test_splits_have_the_asked_sizes_and_share_no_source(splits):
    assert {name: len(pairs) for name, pairs in splits.items()} == SIZES
    sources = [{p.source for p in pairs} for pairs in splits.values()]
    assert all(len(s) == n for s, n in zip(sources, SIZES.values()))  # distinct inside a split
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])


def test_alignments_are_exact_translations(splits):
    for pair in splits["train"]:
        source, target = pair.source.split(), pair.target.split()
        assert len(pair.source_pos) == len(source) and len(pair.target_pos) == len(target)
        aligned_targets = set()
        for i, j in links(pair):
            assert 0 <= i < len(source) and 0 <= j < len(target)
            aligned_targets.add(j)
            if source[i] in LEXICON:  # content words map to their lexicon entry
                assert target[j] == LEXICON[source[i]], (pair.source, pair.target, i, j)
        for j, word in enumerate(target):  # case particles have no source word
            if word in ("ga", "o", "ni"):
                assert j not in aligned_targets


def test_target_is_verb_final_and_marks_cases(splits):
    for pair in splits["train"]:
        assert pair.target_pos[-1] == "VERB"
        assert PARTICLE["subject"] in pair.target.split()


def test_word_order_really_diverges(splits):
    taus = [kendall_tau(oracle_xl_positions(links(p), len(p.source.split()))) for p in splits["train"]]
    assert statistics.mean(taus) < 0.6  # monotone would be 1.0
    assert sum(t < 1.0 for t in taus) > 0.8 * len(taus)


def test_english_articles_agree():
    for pair in generate_pairs(300, seed=1):
        words = pair.source.split()
        for article, following in zip(words, words[1:]):
            if article == "a":
                assert following[0] not in "aeiou"
            if article == "an":
                assert following[0] in "aeiou"


def test_tagger_reproduces_the_gold_tags(splits):
    tagger = SyntheticTagger()
    pairs = splits["test"]
    assert tagger.tag([p.source.split() for p in pairs]) == [p.source_pos for p in pairs]
    assert tagger.tag([p.target.split() for p in pairs]) == [p.target_pos for p in pairs]
    assert all(tag_id > 2 for p in pairs for tag_id in tagger.vocabulary.encode(p.target_pos))  # no <unk>


def test_dataset_dict_has_run_translation_layout():
    data = synthetic_dataset_dict({"train": 20, "validation": 5, "test": 5})
    assert set(data) == {"train", "validation", "test"}
    row = data["train"][0]
    assert set(row["translation"]) == {SOURCE_LANG, TARGET_LANG}
    assert {"alignment", "source_pos", "target_pos"} <= set(data["train"].column_names)


def test_bad_size_is_rejected():
    with pytest.raises(ValueError, match="num_pairs"):
        generate_pairs(-1)
