"""Training the standalone reorderer on prepared features, and jackknifed (k-fold) predicted positions."""

from __future__ import annotations

import json

import pytest
from conftest import TOY_SENTENCES

from xlpe.features.prepare import prepare_dataset
from xlpe.training.reorderer import ReordererTraining, build_reorderer, jackknife_positions, train_reorderer

TINY = dict(d_model=32, ffn_dim=64, pair_dim=16, token_layers=1, word_layers=0)


@pytest.fixture(scope="module")
def reversed_corpus(toy_tokenizer):
    sources = TOY_SENTENCES * 3
    targets = [" ".join(reversed(s.split())) for s in sources]
    links = [[(i, len(s.split()) - 1 - i) for i in range(len(s.split()))] for s in sources]
    dataset, _ = prepare_dataset(sources, targets, toy_tokenizer, alignments=links, features=["reorder_positions"])
    return dataset


def test_jackknifed_positions_cover_every_example_with_a_valid_order(reversed_corpus, toy_tokenizer, tmp_path):
    options = ReordererTraining(epochs=1, batch_size=8, extra={"disable_tqdm": True})
    predicted = jackknife_positions(reversed_corpus, toy_tokenizer, 3, options, tmp_path, **TINY)
    assert len(predicted) == len(reversed_corpus)
    for positions, ids in zip(predicted, reversed_corpus["input_ids"]):
        assert sorted(positions) == list(range(len(ids))) and positions[-1] == len(ids) - 1  # EOS stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fold-0", "fold-1", "fold-2"]
    report = json.loads((tmp_path / "fold-0" / "reorderer_training.json").read_text())
    assert report["train_pairs"] == len(reversed_corpus) - len(reversed_corpus) // 3  # trained without its fold
    with pytest.raises(ValueError, match="folds must be >= 2"):
        jackknife_positions(reversed_corpus, toy_tokenizer, 1, options, tmp_path)


def test_training_needs_oracle_positions(reversed_corpus, toy_tokenizer, tmp_path):
    model = build_reorderer(toy_tokenizer, **TINY)
    with pytest.raises(ValueError, match="reorder_positions"):
        train_reorderer(model, reversed_corpus.remove_columns("reorder_positions"), tmp_path, ReordererTraining())
