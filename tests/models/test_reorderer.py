"""The standalone reorderer: exact BTG chart decoding (brute force), word handling, save/load, XL PE attachment."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.reordering import is_btg_reachable, project_positions_to_subwords, word_positions_from_tokens
from xlpe.models import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.models.btg_chart import btg_decode, btg_log_partition, order_scores, permutation_score
from xlpe.models.configuration_reorderer import XLPEReordererConfig
from xlpe.models.modeling_reorderer import XLPEReordererModel

VOCAB, PAD, EOS = 40, 0, 1
CONTINUATION_IDS = range(30, 40)  # pieces that do not start a word


def antisymmetric(raw: torch.Tensor) -> torch.Tensor:
    return raw - raw.transpose(-1, -2)


# ---------------------------------------------------------------- chart decoder


@settings(deadline=None, max_examples=150)
@given(st.integers(1, 7), st.integers(0, 2**31 - 1), st.sampled_from([0.3, 3.0]))
def test_chart_decoder_returns_the_best_btg_permutation(n, seed, scale):
    logits = antisymmetric(torch.randn(n, n, generator=torch.Generator().manual_seed(seed)) * scale)
    positions = btg_decode(logits[None], torch.tensor([n]))[0]
    assert sorted(positions.tolist()) == list(range(n)) and is_btg_reachable(positions.tolist())
    best = max(
        permutation_score(logits, torch.tensor(p)) for p in itertools.permutations(range(n)) if is_btg_reachable(p)
    )
    assert permutation_score(logits, positions) == pytest.approx(float(best), abs=1e-4)


def test_chart_decoder_batches_rows_of_different_lengths_independently():
    torch.manual_seed(0)
    lengths = [5, 0, 1, 8, 3]
    logits = antisymmetric(torch.randn(len(lengths), 8, 8) * 2)
    batched = btg_decode(logits, torch.tensor(lengths))
    for row, n in enumerate(lengths):
        alone = (
            btg_decode(logits[row : row + 1, :n, :n], torch.tensor([n]))[0] if n else torch.empty(0, dtype=torch.long)
        )
        assert batched[row, :n].tolist() == alone.tolist()
        assert batched[row, n:].tolist() == list(range(n, 8))  # padding slots keep their index


def test_chart_decoder_ties_give_the_monotone_order_and_strong_scores_win():
    assert btg_decode(torch.zeros(1, 6, 6), torch.tensor([6]))[0].tolist() == list(range(6))
    reverse = antisymmetric(torch.triu(torch.full((6, 6), -5.0), 1))  # every pair wants the later word first
    assert btg_decode(reverse[None], torch.tensor([6]))[0].tolist() == [5, 4, 3, 2, 1, 0]


def test_chart_decoder_never_outputs_inseparable_patterns():
    # pair scores that favour 2413 (not BTG-reachable): the decoder returns a reachable permutation instead
    target = [1, 3, 0, 2]
    raw = torch.tensor([[3.0 if target[a] < target[c] else -3.0 for c in range(4)] for a in range(4)])
    positions = btg_decode(torch.triu(raw, 1)[None] - torch.triu(raw, 1).T[None], torch.tensor([4]))[0].tolist()
    assert is_btg_reachable(positions) and positions != target


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1), st.sampled_from([0.3, 3.0]))
def test_log_partition_sums_every_btg_permutation_once(n, seed, scale):
    logits = antisymmetric(torch.randn(n, n, generator=torch.Generator().manual_seed(seed)) * scale)
    scores = [
        permutation_score(logits, torch.tensor(p)) for p in itertools.permutations(range(n)) if is_btg_reachable(p)
    ]
    assert len(scores) == [1, 2, 6, 22, 90, 394][n - 1]  # large Schroeder numbers: the BTG permutations of n words
    expected = torch.logsumexp(torch.stack(scores), 0) if n > 1 else torch.tensor(0.0)
    assert btg_log_partition(logits[None], torch.tensor([n]))[0].item() == pytest.approx(expected.item(), abs=1e-4)


def test_log_partition_batches_rows_independently_and_its_gradient_is_the_pair_marginals():
    torch.manual_seed(1)
    lengths = [4, 0, 1, 6, 2]
    logits = antisymmetric(torch.randn(len(lengths), 6, 6) * 2).requires_grad_()
    log_z = btg_log_partition(logits, torch.tensor(lengths))
    for row, n in enumerate(lengths):
        alone = btg_log_partition(logits[row : row + 1, :n, :n], torch.tensor([n]))[0] if n else torch.tensor(0.0)
        assert log_z[row].item() == pytest.approx(alone.item(), abs=1e-5)
    chunked = btg_log_partition(logits, torch.tensor(lengths), rows_per_chunk=2)  # rows sorted by length, in chunks
    assert torch.allclose(chunked, log_z, atol=1e-5)
    (chunk_gradient,) = torch.autograd.grad(chunked.sum(), logits)
    # d log Z / d l[a, c] summed with d / d l[c, a] is the CRF's P(a before c) - sigma(l[a, c]) for a < c: check one row
    (full_gradient,) = torch.autograd.grad(log_z.sum(), logits, retain_graph=True)
    assert torch.allclose(chunk_gradient, full_gradient, atol=1e-5)
    log_z[3].backward()
    n, row = 6, logits[3].detach()
    perms = [p for p in itertools.permutations(range(n)) if is_btg_reachable(p)]
    weights = torch.softmax(torch.stack([permutation_score(row, torch.tensor(p)) for p in perms]), 0)
    before = torch.stack([torch.tensor(p)[:, None] < torch.tensor(p)[None, :] for p in perms]).float()
    marginal = (weights[:, None, None] * before).sum(0)
    gradient = logits.grad[3] - logits.grad[3].T  # the logits enter antisymmetrically
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    assert torch.allclose(gradient[upper], (marginal - torch.sigmoid(row))[upper], atol=1e-4)
    assert logits.grad[[1, 2]].abs().sum() == 0 and logits.grad[0, 4:].abs().sum() == 0  # padding gets no gradient


def test_order_scores_batch_permutation_score():
    torch.manual_seed(2)
    logits = antisymmetric(torch.randn(2, 5, 5))
    positions = torch.tensor([[2, 0, 4, 1, 3], [1, 0, 2, 3, 4]])
    counts = torch.tensor([5, 3])
    pairs = torch.triu(torch.ones(2, 5, 5, dtype=torch.bool), 1) & (
        torch.arange(5)[None, None, :] < counts[:, None, None]
    )
    scores = order_scores(logits, positions[:, :, None] < positions[:, None, :], pairs)
    assert scores[0].item() == pytest.approx(permutation_score(logits[0], positions[0]).item(), abs=1e-5)
    assert scores[1].item() == pytest.approx(permutation_score(logits[1, :3, :3], positions[1, :3]).item(), abs=1e-5)


# ---------------------------------------------------------------- the model


def tiny_reorderer(**overrides) -> XLPEReordererModel:
    torch.manual_seed(0)
    fields = dict(
        vocab_size=VOCAB,
        d_model=32,
        ffn_dim=64,
        pair_dim=16,
        attention_heads=4,
        token_layers=1,
        word_layers=1,
        pad_token_id=PAD,
        eos_token_id=EOS,
        max_source_positions=64,
        max_words=20,
    )
    model = XLPEReordererModel(XLPEReordererConfig(**{**fields, **overrides}))
    flags = torch.ones(VOCAB, dtype=torch.bool)
    flags[list(CONTINUATION_IDS)] = False
    model.word_starts.set_from(flags)
    return model


@st.composite
def token_rows(draw):
    """Random sentences: word-start ids 2..29, continuation ids 30..39, then EOS, then padding."""
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        words = draw(st.lists(st.integers(1, 3), min_size=0, max_size=9))
        ids = []
        for pieces in words:
            ids += [draw(st.integers(2, 29))] + [draw(st.integers(30, 39)) for _ in range(pieces - 1)]
        rows.append(ids + [EOS])
    width = max(map(len, rows))
    return [row + [PAD] * (width - len(row)) for row in rows], [len(row) for row in rows]


@settings(deadline=None, max_examples=40)
@given(token_rows(), st.sampled_from(["btg", "rank"]))
def test_predicted_positions_keep_words_whole_and_special_tokens_in_place(case, decoder):
    rows, lengths = case
    model = tiny_reorderer(decoder=decoder, training_loss="pairwise").eval()
    with torch.no_grad():  # random but decisive pair scores
        model.query.weight.normal_(0, 2.0), model.key.weight.normal_(0, 2.0)
    ids = torch.tensor(rows)
    mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    positions = model.predict_positions(ids, mask)
    for row, n in zip(positions.tolist(), lengths):
        assert sorted(row) == list(range(len(row)))
        assert row[n - 1] == n - 1 and row[n:] == list(range(n, len(row)))  # EOS and padding stay
    for r, n in enumerate(lengths):
        tokens = rows[r][: n - 1]
        word_ids = list(itertools.accumulate(int(t not in CONTINUATION_IDS) for t in tokens))
        word_ids = [w - 1 for w in word_ids]
        for w in set(word_ids):
            slots = [positions[r, t].item() for t, v in enumerate(word_ids) if v == w]
            assert slots == list(range(slots[0], slots[0] + len(slots)))  # contiguous, pieces in order


@pytest.mark.parametrize(
    "pair_scorer, training_loss",
    [("biaffine", "pairwise"), ("mlp", "pairwise"), ("biaffine", "btg_crf"), ("mlp", "pairwise+btg_crf")],
)
def test_pair_logits_are_antisymmetric_and_the_loss_learns_an_order(pair_scorer, training_loss):
    model = tiny_reorderer(pair_scorer=pair_scorer, training_loss=training_loss)
    ids = torch.tensor([[5, 6, 31, 7, 8, EOS], [9, 10, 11, 12, EOS, PAD]])
    mask = (ids != PAD).long()
    oracle = torch.tensor([[4, 0, 1, 2, 3, 5], [3, 2, 1, 0, 4, 5]])  # row 0: first word last; row 1: reversal
    logits = model(ids, mask).pair_logits
    assert torch.allclose(logits, -logits.transpose(1, 2))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        out = model(ids, mask, reorder_positions=oracle)
        optimiser.zero_grad(), out.loss.backward(), optimiser.step()
    assert out.loss.item() < 0.05 and out.unreachable_oracles.item() == 0
    model.eval()
    assert torch.equal(model.predict_positions(ids, mask), oracle)
    word_positions, counts = model.word_positions(ids, mask)
    assert counts.tolist() == [4, 4] and word_positions[0].tolist() == [3, 0, 1, 2]


def test_crf_loss_leaves_out_and_counts_oracles_that_are_no_btg_permutation():
    model = tiny_reorderer(training_loss="btg_crf").eval()  # no dropout: two forwards compared
    ids = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, 11, 12, EOS]])
    oracle = torch.tensor([[1, 3, 0, 2, 4], [3, 2, 1, 0, 4]])  # row 0: 2413, not BTG-reachable
    both = model(ids, reorder_positions=oracle)
    assert both.unreachable_oracles.item() == 1
    alone = model(ids[1:], reorder_positions=oracle[1:])
    # the loss is normalised by all pairs of the batch (12), the unreachable row adds nothing to the numerator
    assert both.loss.item() == pytest.approx(alone.loss.item() / 2, rel=1e-5)


def test_too_long_inputs_are_refused_naming_the_limit():
    model = tiny_reorderer(max_words=3).eval()
    with pytest.raises(ValueError, match="max_words=3"):
        model.predict_positions(torch.tensor([[5, 6, 7, 8, EOS]]))


def test_save_and_load_round_trip(tmp_path):
    model = tiny_reorderer().eval()
    with torch.no_grad():
        model.query.weight.normal_(0, 2.0)
    ids = torch.tensor([[5, 6, 31, 7, 8, 9, EOS]])
    model.save_pretrained(tmp_path)
    loaded = XLPEReordererModel.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.word_starts.flags, model.word_starts.flags)
    assert torch.equal(loaded.fixed_ids, model.fixed_ids) and torch.equal(loaded.position_table, model.position_table)
    assert torch.equal(loaded.predict_positions(ids), model.predict_positions(ids))


@settings(deadline=None, max_examples=100)
@given(
    st.integers(0, 10).flatmap(
        lambda n: st.tuples(st.permutations(list(range(n))), st.lists(st.integers(1, 3), min_size=n, max_size=n))
    )
)
def test_word_positions_from_tokens_inverts_the_subword_projection(case):
    word_positions, pieces = case
    word_ids = [w for w, count in enumerate(pieces) for _ in range(count)] + [None]
    tokens = project_positions_to_subwords(word_positions, word_ids)
    assert word_positions_from_tokens(tokens, word_ids, len(word_positions)) == list(word_positions)


# ---------------------------------------------------------------- inside an XL PE checkpoint


def tiny_xlpe(**overrides) -> XLPEMarianMTModel:
    torch.manual_seed(1)
    fields = dict(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        max_position_embeddings=64,
    )
    return XLPEMarianMTModel(XLPEMarianConfig(**{**fields, **overrides})).eval()


def test_attached_reorderer_supplies_the_positions_and_travels_with_the_checkpoint(tmp_path):
    model, reorderer = tiny_xlpe(), tiny_reorderer()
    with torch.no_grad():
        reorderer.query.weight.normal_(0, 3.0), reorderer.key.weight.normal_(0, 3.0)
    ids = torch.tensor([[5, 6, 31, 7, 8, 9, 10, EOS]])
    expected = reorderer.eval().predict_positions(ids)
    assert not torch.equal(expected, torch.arange(8)[None])  # a real reordering, not the identity
    model.attach_reorderer(reorderer)
    assert torch.equal(model.get_encoder()(ids).reorder_positions, expected)
    oracle = torch.arange(8)[None]
    assert torch.equal(model.get_encoder()(ids, reorder_positions=oracle).reorder_positions, oracle)  # given wins
    model.save_pretrained(tmp_path)
    assert {"modeling_reorderer.py", "configuration_reorderer.py", "btg_chart.py"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.get_encoder()(ids).reorder_positions, expected)
    assert torch.equal(loaded.generate(ids, max_new_tokens=4), model.generate(ids, max_new_tokens=4))
    loaded.attach_reorderer(None)  # back to the built-in predictor
    assert loaded.config.reorderer_config is None and loaded.get_encoder().reorderer is None


def test_attaching_a_mismatched_reorderer_is_refused():
    with pytest.raises(ValueError, match="pad_token_id"):
        tiny_xlpe().attach_reorderer(tiny_reorderer(pad_token_id=3))
    with pytest.raises(ValueError, match="nothing for a reorderer to predict"):
        tiny_xlpe(xl_strategy="none").attach_reorderer(tiny_reorderer())


def test_config_rejects_bad_fields():
    with pytest.raises(ValueError, match="decoder"):
        XLPEReordererConfig(decoder="greedy")
    with pytest.raises(ValueError, match="pair_scorer"):
        XLPEReordererConfig(pair_scorer="cosine")
    with pytest.raises(ValueError, match="training_loss"):
        XLPEReordererConfig(training_loss="margin")
    with pytest.raises(ValueError, match='decoder="rank" sorts by pair probabilities'):
        XLPEReordererConfig(decoder="rank", training_loss="btg_crf")
    with pytest.raises(ValueError, match="max_words"):
        XLPEReordererConfig(max_words=0)
    with pytest.raises(ValueError, match="divisible"):
        XLPEReordererConfig(d_model=30, attention_heads=4)


def test_order_prior_pulls_decoding_toward_the_source_order():
    model = tiny_reorderer().eval()
    with torch.no_grad():
        model.query.weight.normal_(0, 3.0), model.key.weight.normal_(0, 3.0)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, EOS]])
    free = model.predict_positions(ids)
    assert not torch.equal(free, torch.arange(7)[None])
    model.config.order_prior = 1e4  # every pair's evidence outweighed: the monotone order
    assert torch.equal(model.predict_positions(ids), torch.arange(7)[None])
    model.config.order_prior = 0.0
    assert torch.equal(model.predict_positions(ids), free)


def test_attached_reorderer_is_frozen_and_predicts_without_dropout_while_the_model_trains(tmp_path):
    model, reorderer = tiny_xlpe(), tiny_reorderer(dropout=0.5)
    with torch.no_grad():
        reorderer.query.weight.normal_(0, 3.0), reorderer.key.weight.normal_(0, 3.0)
    model.attach_reorderer(reorderer)
    model.config.xl_train_positions = "predicted"
    model.train()
    ids = torch.tensor([[5, 6, 31, 7, 8, 9, 10, EOS]])
    first, second = (model.get_encoder()(ids).reorder_positions for _ in range(2))
    assert torch.equal(first, second) and torch.equal(first, reorderer.eval().predict_positions(ids))
    model.save_pretrained(tmp_path)
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).train()
    loaded.config.xl_train_positions = "predicted"
    before = {k: v.clone() for k, v in loaded.get_encoder().reorderer.state_dict().items()}
    optimiser = torch.optim.AdamW(loaded.parameters(), lr=1e-2, weight_decay=0.1)
    loaded(ids, labels=torch.tensor([[5, 6, EOS]])).loss.backward()
    optimiser.step()  # the reorderer gets no gradient, so neither an update nor weight decay
    after = loaded.get_encoder().reorderer.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
