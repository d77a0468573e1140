"""The standalone reorderer's training batches (`xlpe-reorder train`): length-grouped by a word-pair budget
(`sampling.reorderer_batch_sampler`, `WordPairBatchSampler`), as the reorderer's Trainer serves them: every sentence
once per epoch, each batch a run of the word-sorted sentences (its longest / shortest as small as sorting allows),
within the budget, `batch_size` sentences on average, the same batches for the same seed and epoch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TOY_SENTENCES
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.training.sampling import (
    ShuffledLengthGroupedSampler,
    WordPairBatchSampler,
    reorderer_batch_sampler,
    word_pair_budget,
    word_pair_costs,
)

word_counts = st.lists(st.integers(0, 120), min_size=1, max_size=400)


@settings(deadline=None, max_examples=80)
@given(word_counts, st.integers(1, 80), st.integers(0, 1000), st.integers(0, 3))
def test_word_pair_batches_are_length_grouped_cover_every_sentence_once_and_repeat_with_the_seed(
    counts, batch_size, seed, epoch
):
    counts = np.asarray(counts)
    sampler = reorderer_batch_sampler(counts, batch_size, seed)
    sampler.set_epoch(epoch)
    batches = sampler.batches()
    served = np.concatenate(batches)
    assert sorted(served.tolist()) == list(range(len(counts)))  # every sentence exactly once
    assert len(batches) == len(sampler) == -(-len(counts) // batch_size)  # batch_size sentences a step on average
    costs, budget = word_pair_costs(counts), word_pair_budget(counts, batch_size)
    assert all(len(b) * costs[b].max() <= budget for b in batches)  # padded word pairs within the budget
    # each batch is a run of the sentences sorted by words: no other sentence lies strictly inside its range, so
    # its longest / shortest is the smallest that len(batch) sentences of the data allow there
    ordered = sorted(batches, key=lambda b: (counts[b].min(), counts[b].max()))
    for before, after in zip(ordered, ordered[1:]):
        assert counts[before].max() <= counts[after].min()
    # the same seed and epoch: the same batches in the same order; another epoch: the same cut, another order
    again = reorderer_batch_sampler(counts, batch_size, seed)
    again.set_epoch(epoch)
    assert [b.tolist() for b in again.batches()] == [b.tolist() for b in batches]
    again.set_epoch(epoch + 1)
    assert sorted(len(b) for b in again.batches()) == sorted(len(b) for b in batches)


def news_like_counts(n: int = 3000, seed: int = 0) -> np.ndarray:
    """Word counts distributed like WMT news sentences (median about 20, a tail past 60)."""
    return np.clip(np.random.default_rng(seed).lognormal(np.log(19), 0.5, n).round(), 1, 120).astype(int)


def test_on_news_lengths_long_sentences_get_small_batches_and_no_batch_pays_for_one_long_sentence():
    counts = news_like_counts()
    batches = reorderer_batch_sampler(counts, 64, seed=1).batches()
    spread = np.array([counts[b].max() / counts[b].min() for b in batches])
    longest = np.array([counts[b].max() for b in batches])
    assert np.median(spread) <= 1.1 and spread[longest >= np.median(counts)].max() <= 1.25
    sizes = np.array([len(b) for b in batches])
    assert sizes[longest == longest.max()][0] < 16 < 64 < sizes.max() <= 3 * 64  # fewer the longer they are
    # the costliest batch's chart (sentences x longest^3) against random batches of 64 with the same seed
    chart = (sizes * longest.astype(float) ** 3).max()
    draw = np.random.default_rng(1).permutation(len(counts))
    random_chart = max(len(b) * float(counts[b].max()) ** 3 for b in np.array_split(draw, len(batches)))
    assert chart < random_chart / 4


def test_sentence_batches_and_random_batches_on_request():
    counts = news_like_counts(500)
    grouped = reorderer_batch_sampler(counts, 32, seed=2, batching="sentences")
    assert isinstance(grouped, ShuffledLengthGroupedSampler) and sorted(grouped) == list(range(500))
    assert reorderer_batch_sampler(counts, 32, seed=2, batching="random") is None
    assert isinstance(reorderer_batch_sampler(counts, 32, seed=2), WordPairBatchSampler)
    with pytest.raises(ValueError, match="batching must be one of"):
        reorderer_batch_sampler(counts, 32, seed=2, batching="tokens")


def test_the_reorderers_trainer_serves_the_samplers_batches_epoch_by_epoch(toy_tokenizer, tmp_path):
    """What the Trainer's dataloader yields for epoch e is the sampler's epoch e (a run resumed at an epoch's
    checkpoint sets that epoch and draws the same batches), and the word counts are the model's."""
    from transformers import TrainingArguments

    from xlpe.features.predicted_reordering import collate
    from xlpe.features.prepare import prepare_dataset
    from xlpe.training.reorderer import build_reorderer, reorderer_trainer, sentence_word_counts

    sources = TOY_SENTENCES * 3
    targets = [" ".join(reversed(s.split())) for s in sources]
    links = [[(i, len(s.split()) - 1 - i) for i in range(len(s.split()))] for s in sources]
    dataset, _ = prepare_dataset(sources, targets, toy_tokenizer, alignments=links, features=["reorder_positions"])
    dataset = dataset.select_columns(["input_ids", "attention_mask", "reorder_positions"])
    model = build_reorderer(toy_tokenizer, d_model=32, ffn_dim=64, pair_dim=16, token_layers=1, word_layers=0)
    counts = sentence_word_counts(model, dataset)
    assert counts.tolist() == [len(s.split()) for s in sources]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, seed=7, report_to=[], use_cpu=True
    )
    trainer = reorderer_trainer(
        model, args, dataset, data_collator=lambda rows: collate(rows, model.config.pad_token_id)
    )
    loader = trainer.get_train_dataloader()
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        served = [batch["attention_mask"].sum(dim=1).tolist() for batch in loader]
        expected = reorderer_batch_sampler(counts, 4, seed=7)
        expected.set_epoch(epoch)
        lengths = [len(ids) for ids in dataset["input_ids"]]
        assert served == [[lengths[i] for i in batch] for batch in expected.batches()]
