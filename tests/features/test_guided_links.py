"""The guided alignment supervision (`alignment_links`, xlpe/features/guided_links.py): the batch step of the
preparation gives, per pair, every (target sub-word, source sub-word) pair of the word links, sorted and without
duplicates, equal to a per-sentence reference written with loops; the collator pads the rows to the batch's
longest with -100."""

from __future__ import annotations

from test_example_features import random_batch

from xlpe.features.example_features import PrepareOptions, _compute_features
from xlpe.features.guided_links import subword_links_flat
from xlpe.features.tokenization import tokenize_with_word_ids
from xlpe.training.collator import ExtraInputsDataCollator


def reference_links(source_word_ids, target_word_ids, word_links):
    pairs = set()
    for i, j in zip(word_links[0::2], word_links[1::2]):
        for t, tw in enumerate(target_word_ids):
            for s, sw in enumerate(source_word_ids):
                if sw == i and tw == j:
                    pairs.add((t, s))
    return [x for pair in sorted(pairs) for x in pair]


def test_a_hand_made_pair():
    # source tokens: w0 w0 w1 </s>; target tokens: w0 w1 w1 </s>; links 0-1 and 1-0; second pair: no link
    values, offsets = subword_links_flat(
        [0, 0], [0, 1], [1, 0], [0, 2, 3], [0, 2, 3], [0, 0, 1, -1, 0, -1], [0, 4, 6], [0, 1, 1, -1, 0, -1], [0, 4, 6]
    )
    assert values.reshape(-1, 2).tolist() == [[0, 2], [1, 0], [1, 1], [2, 0], [2, 1]]
    assert offsets.tolist() == [0, 10, 10]


def test_the_prepared_feature_equals_the_per_sentence_reference(toy_tokenizer):
    batch = random_batch(60, seed=3)
    options = PrepareOptions(aligner=lambda s, t: [], features=["alignment_links"])
    table = _compute_features(batch, toy_tokenizer, options).to_pydict()
    _, source_words = tokenize_with_word_ids(toy_tokenizer, batch["_source"])
    _, target_words = tokenize_with_word_ids(toy_tokenizer, batch["_target"], target=True)
    expected = [reference_links(s, t, links) for s, t, links in zip(source_words, target_words, batch["_links"])]
    assert table["alignment_links"] == expected
    assert sum(len(row) > 0 for row in expected) > 30  # the batch does exercise links


def test_the_collator_pads_the_links_to_the_longest_row(toy_tokenizer):
    features = [
        {"input_ids": [5, 6, 2], "labels": [7, 2], "alignment_links": [0, 1, 1, 0]},
        {"input_ids": [5, 2], "labels": [7, 8, 2], "alignment_links": [0, 0]},
    ]
    batch = ExtraInputsDataCollator(toy_tokenizer)(features)
    assert batch["alignment_links"].tolist() == [[0, 1, 1, 0], [0, 0, -100, -100]]
    assert features[1]["alignment_links"] == [0, 0]  # the examples are left as they were
