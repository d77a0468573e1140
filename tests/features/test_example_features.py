"""The per-batch feature step (`_compute_features`, flat numpy over the whole batch) against a plain per-sentence
reference (the per-sentence functions of reordering.py and tagging.py, one pair at a time): the same values and
the same Arrow types, from a dict batch and inside `Dataset.map`."""

from __future__ import annotations

import math

import datasets
import numpy as np
import pytest
from conftest import TOY_SENTENCES

from xlpe.features.alignment import format_pharaoh
from xlpe.features.example_features import PrepareOptions, _compute_features
from xlpe.features.reordering import (
    add_reordering_noise,
    dpe_target_positions,
    kendall_tau,
    oracle_xl_positions_batch,
    project_positions_to_subwords,
)
from xlpe.features.tagging import UNK_TAG_ID, Tagger, TagVocabulary, subword_tag_ids
from xlpe.features.tokenization import (
    _word_ids_from_encoding,
    tokenize_batch,
    tokenize_with_word_ids,
)

INPUT_FEATURES = datasets.Features(
    {
        "_line": datasets.Value("int64"),
        "_source": datasets.Value("string"),
        "_target": datasets.Value("string"),
        "_links": datasets.List(datasets.Value("int32")),
    }
)


class LengthTagger(Tagger):
    """Deterministic toy tagger: a word's tag is its length class; 'LONG' is not in the vocabulary (<unk>)."""

    name = "length"

    def __init__(self):
        self.vocabulary = TagVocabulary(["SHORT", "MID"])

    def tag(self, sentences):
        return [["SHORT" if len(w) < 3 else "MID" if len(w) < 6 else "LONG" for w in words] for words in sentences]


def reference_word_ids(tokenizer, texts, target=False):
    """Per text: ids and word ids as the per-encoding function gives them (no batch-level shortcut)."""
    encoded = tokenizer(text_target=texts) if target else tokenizer(texts)
    return (
        [e.ids for e in encoded.encodings],
        [_word_ids_from_encoding(e, t.split(), t) for e, t in zip(encoded.encodings, texts)],
    )


def reference_features(batch, tokenizer, options: PrepareOptions, keep_text=False) -> dict:
    """The feature step one pair at a time with the per-sentence functions (what `_compute_features` computed
    before it worked on flat batches)."""
    sources, targets, lines, links = batch["_source"], batch["_target"], batch["_line"], batch["_links"]
    source_words = [s.split() for s in sources]
    input_ids, source_word_ids = reference_word_ids(tokenizer, sources)
    labels, target_word_ids = reference_word_ids(tokenizer, targets, target=True)
    out = {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        "_too_long": [
            "source_too_long"
            if len(s) > options.max_length
            else "target_too_long"
            if len(t) > options.target_limit
            else ""
            for s, t in zip(input_ids, labels)
        ],
        "_words": [len(w) for w in source_words],
    }
    if options.needs_links:
        none_ids = [[None if w < 0 else w for w in ids] for ids in source_word_ids]
        oracle = oracle_xl_positions_batch(links, out["_words"], unaligned=options.unaligned)
        word_positions = oracle.to_lists()
        out["_unaligned"], out["_repaired"] = oracle.unaligned_words.tolist(), oracle.repaired.tolist()
        out["_tau"] = [kendall_tau(p) if len(p) > 1 else float("nan") for p in word_positions]
        if "reorder_positions" in options.features:
            if options.noise_ratio > 0:
                word_positions = [
                    add_reordering_noise(p, options.noise_ratio, np.random.default_rng([options.seed, line]))
                    for p, line in zip(word_positions, lines)
                ]
            out["reorder_positions"] = list(map(project_positions_to_subwords, word_positions, none_ids))
        if "target_positions" in options.features:
            out["target_positions"] = [
                dpe_target_positions(pair_links, len(words), ids, unaligned=options.dpe_unaligned)
                for pair_links, words, ids in zip(links, source_words, none_ids)
            ]
    for feature, tagger, words_batch, word_ids_batch in (
        ("pos_tag_ids", options.source_tagger, source_words, source_word_ids),
        ("decoder_pos_tag_ids", options.target_tagger, [t.split() for t in targets], target_word_ids),
    ):
        if feature in options.features:
            tags = tagger.tag(words_batch)
            word_tag_ids = [tagger.vocabulary.encode(t) for t in tags]
            out[feature] = list(map(subword_tag_ids, word_tag_ids, word_ids_batch))
            out[f"_unknown_{feature}"] = [
                [t for t, i in zip(ts, ids) if i == UNK_TAG_ID] for ts, ids in zip(tags, word_tag_ids)
            ]
    if keep_text:
        out.update(
            line=lines, source_text=sources, target_text=targets, word_alignment=list(map(format_pharaoh, links))
        )
    return out


def random_batch(count: int, seed: int = 0) -> dict:
    """Pairs of toy sentences (plus texts whose NFKC normalisation splits words: the offsets fallback) with
    random links: unaligned words, one-to-many links, crossings (some need a BTG repair)."""
    rng = np.random.default_rng(seed)
    odd = ["the ¨cat sees", "the cat¨ sees the dog", "¨ the cat", "a", "the dog the dog the dog the dog the dog"]
    texts = TOY_SENTENCES + odd
    sources = [" ".join(texts[k].split()) for k in rng.integers(0, len(texts), count)]
    targets = [" ".join(texts[k].split()) for k in rng.integers(0, len(texts), count)]
    links = []
    for source, target in zip(sources, targets):
        n, m = len(source.split()), len(target.split())
        pairs = {(i, int(j)) for i in range(n) if rng.random() > 0.2 for j in rng.integers(0, m, rng.integers(1, 3))}
        links.append([x for pair in sorted(pairs, key=lambda p: rng.random()) for x in pair])
    return {
        "_line": [int(k) for k in rng.permutation(count) + 1],
        "_source": sources,
        "_target": targets,
        "_links": links,
    }


def same(column, expected, actual):
    if column == "_tau":
        return all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(expected, actual))
    return expected == actual


OPTIONS = [
    {},
    {"dpe_unaligned": "keep"},
    {"noise_ratio": 0.3, "seed": 2},
    {"unaligned": "left", "max_length": 6, "max_target_length": 8},
    {"features": ["target_positions"]},
    {
        "features": ["reorder_positions", "pos_tag_ids", "decoder_pos_tag_ids"],
        "source_tagger": LengthTagger(),
        "target_tagger": LengthTagger(),
    },
    {"features": ["pos_tag_ids"], "source_tagger": LengthTagger()},
]


@pytest.mark.parametrize("keep_text", [False, True])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_batch_features_equal_the_per_sentence_reference(toy_tokenizer, options, keep_text):
    batch, options = random_batch(300, seed=len(str(options))), PrepareOptions(aligner=lambda s, t: [], **options)
    expected = reference_features(batch, toy_tokenizer, options, keep_text)
    table = _compute_features(batch, toy_tokenizer, options, keep_text)
    assert table.column_names == list(expected)
    for column, values in table.to_pydict().items():
        assert same(column, expected[column], values), column
    # inside Dataset.map (the batch arrives as Arrow): the same values, and the types datasets gives the lists
    dataset = datasets.Dataset.from_dict(batch, features=INPUT_FEATURES)
    kwargs = {"tokenizer": toy_tokenizer, "options": options, "keep_text": keep_text}
    mapped, reference = (
        dataset.map(
            function,
            batched=True,
            batch_size=64,
            remove_columns=dataset.column_names,
            fn_kwargs=kwargs,
            load_from_cache_file=False,
        )
        for function in (_compute_features, reference_features)
    )
    assert mapped.features == reference.features
    assert mapped.features["input_ids"] == datasets.List(datasets.Value("int32"))
    for column in reference.column_names:
        assert same(column, reference[column], mapped[column]), column


def test_bad_links_are_refused_before_any_feature(toy_tokenizer):
    batch = {
        "_line": [1, 2],
        "_source": ["the cat", "a dog"],
        "_target": ["die katze", "ein hund"],
        "_links": [[0, 0], [2, 1]],
    }
    for features in (["reorder_positions"], ["target_positions"]):
        options = PrepareOptions(aligner=lambda s, t: [], features=features)
        with pytest.raises(ValueError, match=r"outside the source sentence of 2 words: \[\[2, 1\]\]"):
            _compute_features(batch, toy_tokenizer, options)


@pytest.mark.parametrize("target", [False, True])
def test_tokenize_batch_equals_the_per_text_word_ids(toy_tokenizer, target):
    texts = random_batch(200)["_source"]
    expected = reference_word_ids(toy_tokenizer, texts, target=target)
    batch = tokenize_batch(toy_tokenizer, texts, target=target)
    assert batch.to_lists() == tuple(expected) == tokenize_with_word_ids(toy_tokenizer, texts, target=target)
    assert batch.num_words.tolist() == [len(t.split()) for t in texts]
    assert batch.lengths.tolist() == [len(ids) for ids in expected[0]]
