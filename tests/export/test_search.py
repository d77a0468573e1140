"""Properties of the export's numpy search primitives (xlpe/export/search.py): the chunked top-k is a stable sort's
first k columns on any scores (ties, -inf rows after a forced token, rows shorter than a chunk), the in-place
log_softmax computes the same values, a beam step's scores skip the first log_softmax only where that changes no
value, onnxruntime's log_softmax (the runtime's) gives numpy's values and the same hypotheses, and a beam search
whose steps take the chunked path decodes exactly as one that sorts whole rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from xlpe.export import search
from xlpe.export.search import SearchSettings, beam_search, log_softmax, top_k

SCORES = st.one_of(
    st.floats(-3, 3, width=32),
    st.sampled_from([-np.inf, 0.0, -1.0, 1.0]),  # ties and forced rows
)


@st.composite
def score_rows(draw):
    rows = draw(st.integers(1, 6))
    width = draw(st.integers(1, 700))
    values = draw(arrays(np.float32, (rows, width), elements=SCORES))
    k = draw(st.integers(1, min(width, 20)))
    return values, k


@settings(max_examples=300, deadline=None)
@given(score_rows(), st.sampled_from([1, 3, 8, 64]))
def test_chunked_top_k_is_a_stable_sort(case, chunk):
    values, k = case
    expected = np.argsort(-values, axis=1, kind="stable")[:, :k]
    old = (search.TOP_K_CHUNK, search.TOP_K_SHORT_ROW)
    search.TOP_K_CHUNK, search.TOP_K_SHORT_ROW = chunk, 0  # the chunked path on every row length
    try:
        chosen = top_k(values, k)
    finally:
        search.TOP_K_CHUNK, search.TOP_K_SHORT_ROW = old
    np.testing.assert_array_equal(chosen, expected)
    np.testing.assert_array_equal(top_k(values, k), expected)  # the default path too


def test_chunked_top_k_takes_the_chunked_path_on_a_beam_row():
    """A beam row of OPUS-MT size (4 beams x 15k) with finite scores is served by the chunks, not a sort."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((16, 4 * 15259)).astype(np.float32)
    calls = []
    original = search._top_k_sorted

    def counting(rows, k):
        calls.append(rows.shape)
        return original(rows, k)

    search._top_k_sorted = counting
    try:
        chosen = top_k(values, 8)
    finally:
        search._top_k_sorted = original
    np.testing.assert_array_equal(chosen, np.argsort(-values, axis=1, kind="stable")[:, :8])
    assert calls and all(width < 16 * search.TOP_K_CHUNK for _, width in calls), calls


@settings(max_examples=100, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 50)), elements=st.floats(-30, 30, width=32)))
def test_log_softmax_in_place_is_the_same_values(logits):
    kept = logits.copy()
    fresh = log_softmax(logits)
    np.testing.assert_array_equal(logits, kept)  # not overwritten unless asked
    buffer = logits.copy()
    in_place = log_softmax(buffer, overwrite=True)
    assert in_place is buffer
    np.testing.assert_array_equal(in_place, fresh)


@settings(max_examples=200, deadline=None)
@given(
    arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(3, 60)), elements=st.floats(-30, 30, width=32)),
    st.integers(1, 8),  # cur_len
    st.booleans(),  # forced bos/eos
    st.integers(0, 8),  # min_new_tokens
    st.data(),
)
def test_beam_log_probs_skip_the_first_log_softmax_only_when_renormalizing(logits, cur_len, forced, minimum, data):
    """`beam_log_probs` equals `generate`'s order (log_softmax, the processors, log_softmax again when
    renormalizing) up to rounding, with -inf in exactly the same places; without renormalizing, exactly."""
    rows, vocab = logits.shape
    budgets = data.draw(st.none() | arrays(np.int64, (rows,), elements=st.integers(1, 8)))
    config = dict(
        decoder_start_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        bad_words_ids=[[2]],
        min_new_tokens=minimum,
        max_length=cur_len + 1 + data.draw(st.integers(0, 1)),
        forced_bos_token_id=vocab - 1 if forced else None,
        forced_eos_token_id=1 if forced else None,
    )
    for renormalize in (False, True):
        settings_ = SearchSettings.from_generation_config({**config, "renormalize_logits": renormalize})
        expected = settings_.process(log_softmax(logits), cur_len, budgets)
        actual = settings_.beam_log_probs(logits.copy(), cur_len, budgets)
        np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
        if renormalize:
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-5)
        else:
            np.testing.assert_array_equal(actual, expected)


def fake_search_case(vocab: int, beams: int, renormalize: bool, seed: int, **generation):
    """A fake model (the next token's logits from a fixed random table, drifting with the length) for 3 sentences,
    its search settings (pad banned, forced end, at most 12 new tokens) and the sentences' length budgets."""
    table = np.random.default_rng(seed).standard_normal((vocab, vocab)).astype(np.float32) * 3

    def next_logits(sequences, reorder):
        return table[sequences[:, -1] % vocab] + np.float32(0.01) * sequences.shape[1]

    config = dict(
        decoder_start_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        num_beams=beams,
        bad_words_ids=[[0]],
        renormalize_logits=renormalize,
        forced_eos_token_id=2,
        **generation,
    )
    return next_logits, SearchSettings.from_generation_config(config, max_new_tokens=12), np.array([4, 12, 7])


@pytest.mark.parametrize("renormalize", [False, True])
def test_beam_search_decodes_the_same_on_either_top_k_path(renormalize, monkeypatch):
    """A fake model with a 3,000-token vocabulary and 5 beams (15,000 scores a sentence), a length budget and
    forced end: the chunked top-k and the whole-row sort give the same hypotheses."""
    next_logits, settings_, budgets = fake_search_case(3000, 5, renormalize, seed=1)
    monkeypatch.setattr(search, "TOP_K_SHORT_ROW", 10**9)
    sorted_rows = beam_search(next_logits, 3, settings_, budgets)
    monkeypatch.setattr(search, "TOP_K_SHORT_ROW", 0)
    chunked = beam_search(next_logits, 3, settings_, budgets)
    np.testing.assert_array_equal(chunked, sorted_rows)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 300)), elements=SCORES),
    st.booleans(),
)
def test_onnxruntime_log_softmax_matches_numpy(scores, forced_row):
    """The runtime's `normalize` (onnxruntime's LogSoftmax, runtime.py) gives numpy's values up to rounding, with
    -inf in the same places: masked entries, and a forced row (-inf but one 0) that stays exactly as it is."""
    pytest.importorskip("onnxruntime")
    from xlpe.export.runtime import log_softmax_session, session_options

    scores[:, 0] = np.maximum(scores[:, 0], 0.0)  # at least one finite entry a row, as after any processor
    if forced_row:
        scores[0] = -np.inf
        scores[0, -1] = 0.0
    normalize = log_softmax_session(session_options(1))
    expected = log_softmax(scores)
    actual = normalize(scores.copy())
    assert actual.dtype == np.float32 and actual.shape == scores.shape
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    if forced_row:
        np.testing.assert_array_equal(actual[0], scores[0])


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("beams", [1, 4])
def test_search_decodes_the_same_with_onnxruntime_log_softmax(renormalize, beams):
    """The same hypotheses from greedy and beam search whether numpy or onnxruntime computes the log_softmax."""
    pytest.importorskip("onnxruntime")
    from xlpe.export.runtime import log_softmax_session, session_options

    next_logits, settings_, budgets = fake_search_case(500, beams, renormalize, seed=2, min_new_tokens=3)
    numpy_rows = search.search(next_logits, 3, settings_, budgets)
    onnx_rows = search.search(next_logits, 3, settings_, budgets, log_softmax_session(session_options(1)))
    np.testing.assert_array_equal(onnx_rows, numpy_rows)
