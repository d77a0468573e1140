"""Oracle BTG reorderings (XL PE Sec. 3.1, Fig. 1), sub-word projection, DPE ranks, noise and scores."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.reordering import (
    IGNORE_INDEX,
    add_reordering_noise,
    check_links_flat,
    dpe_target_positions,
    dpe_target_positions_flat,
    fuzzy_reordering_score,
    is_btg_reachable,
    kendall_tau,
    kendall_tau_flat,
    oracle_xl_positions,
    oracle_xl_positions_batch,
    project_positions_to_subwords,
    project_positions_to_subwords_flat,
    repair_btg,
    swap_noise_in_place,
)


def contains_2413_or_3142(perm) -> bool:
    """Brute-force pattern search, independent of the shift-reduce recogniser."""
    for a, b, c, d in itertools.combinations(range(len(perm)), 4):
        pattern = tuple(np.argsort(np.argsort([perm[a], perm[b], perm[c], perm[d]])))
        if pattern in ((1, 3, 0, 2), (2, 0, 3, 1)):
            return True
    return False


def discordant_pairs(p, q) -> int:
    return sum((p[i] < p[j]) != (q[i] < q[j]) for i, j in itertools.combinations(range(len(p)), 2))


def reference_oracle(links, n, unaligned="right"):
    """The lader rules written as plainly as possible (quadratic), to check the vectorised oracle against."""
    spans = [None] * n
    for i, j in links:
        spans[i] = (j, j) if spans[i] is None else (min(spans[i][0], j), max(spans[i][1], j))
    aligned = [k for k in range(n) if spans[k] is not None]
    if not aligned:
        return list(range(n))
    effective = []
    for k in range(n):
        right = [a for a in aligned if a > k]
        left = [a for a in aligned if a < k]
        if spans[k] is not None:
            donor = k
        elif unaligned == "right":
            donor = right[0] if right else left[-1]
        else:
            donor = left[-1] if left else right[0]
        effective.append(list(spans[donor]))
    blocks = [[k] for k in range(n)]
    block_spans = [list(s) for s in effective]
    merged = True
    while merged:
        merged = False
        for a, b in itertools.combinations(range(len(blocks)), 2):
            if not (block_spans[a][1] < block_spans[b][0] or block_spans[b][1] < block_spans[a][0]):
                blocks[a] += blocks.pop(b)
                span_b = block_spans.pop(b)
                block_spans[a] = [min(block_spans[a][0], span_b[0]), max(block_spans[a][1], span_b[1])]
                merged = True
                break
    rank = {w: r for r, b in enumerate(sorted(range(len(blocks)), key=lambda b: block_spans[b][0])) for w in blocks[b]}
    order = sorted(range(n), key=lambda w: (rank[w], w))
    return [order.index(w) for w in range(n)]


@st.composite
def sentence_pairs(draw, max_source=10, max_target=10):
    n = draw(st.integers(0, max_source))
    m = draw(st.integers(1, max_target))
    cells = [(i, j) for i in range(n) for j in range(m)]
    links = draw(st.lists(st.sampled_from(cells), max_size=2 * n, unique=True)) if cells else []
    return sorted(links), n


# ---------------------------------------------------------------- the oracle


def test_figure_1_worked_example():
    # XL PE Fig. 1b: abs 0 1 2 3 4 5 -> XL 0 3 4 5 1 2 (one link per word)
    assert oracle_xl_positions([(0, 0), (1, 3), (2, 4), (3, 5), (4, 1), (5, 2)], 6) == [0, 3, 4, 5, 1, 2]
    # the same order with lader's rules at work: word 2 is unaligned and attaches to its right neighbour,
    # word 3 has a one-to-many span [4, 5]
    links = [(0, 0), (1, 3), (3, 4), (3, 5), (4, 1), (5, 2)]
    assert oracle_xl_positions(links, 6) == [0, 3, 4, 5, 1, 2]


def test_lader_rules():
    # overlapping spans [1, 2] and [0, 1] merge into one block: source order kept, not swapped
    assert oracle_xl_positions([(0, 1), (0, 2), (1, 0), (1, 1)], 2) == [0, 1]
    # disjoint spans: swapped
    assert oracle_xl_positions([(0, 1), (1, 0)], 2) == [1, 0]
    # unaligned word 1 attaches right (to word 2, which goes first) or left (to word 0, which goes last)
    links = [(0, 1), (2, 0)]
    assert oracle_xl_positions(links, 3, unaligned="right") == [2, 0, 1]
    assert oracle_xl_positions(links, 3, unaligned="left") == [1, 2, 0]
    # a trailing unaligned word copies its left neighbour (and moves with it); an unaligned sentence is monotone
    assert oracle_xl_positions([(0, 1), (1, 0)], 3) == [2, 0, 1]
    assert oracle_xl_positions([], 4) == [0, 1, 2, 3]
    assert oracle_xl_positions([], 0) == []


@settings(deadline=None, max_examples=300)
@given(sentence_pairs(), st.sampled_from(["right", "left"]))
def test_oracle_is_a_btg_reachable_permutation(pair, unaligned):
    links, n = pair
    positions = oracle_xl_positions(links, n, unaligned=unaligned)
    assert sorted(positions) == list(range(n))
    assert is_btg_reachable(positions)
    assert not contains_2413_or_3142(positions)


@settings(deadline=None, max_examples=300)
@given(sentence_pairs(), st.sampled_from(["right", "left"]))
def test_vectorised_oracle_matches_the_plain_rules(pair, unaligned):
    links, n = pair
    assert oracle_xl_positions(links, n, unaligned=unaligned, repair=False) == reference_oracle(links, n, unaligned)


@settings(deadline=None, max_examples=100)
@given(st.integers(1, 30), st.data())
def test_monotone_links_give_identity(n, data):
    unaligned = data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    links = [(i, i) for i in range(n) if i not in unaligned]
    assert oracle_xl_positions(links, n) == list(range(n))


@settings(deadline=None, max_examples=100)
@given(st.integers(1, 30), st.integers(0, 3))
def test_fully_inverted_links_give_reversal(n, extra_target_words):
    links = [(i, n - 1 - i + extra_target_words) for i in range(n)]
    assert oracle_xl_positions(links, n) == list(range(n - 1, -1, -1))


def test_batch_counts_repairs_and_unaligned_words():
    batch = oracle_xl_positions_batch(
        [[(0, 1), (1, 3), (2, 0), (3, 2)], [0, 0, 2, 1], [(0, 2), (1, 0), (2, 3), (3, 1)]], [4, 3, 4]
    )
    assert batch.repaired.tolist() == [True, False, True]  # 2413 and 3142 need a repair
    assert batch.unaligned_words.tolist() == [0, 1, 0]
    for positions in batch.to_lists():
        assert is_btg_reachable(positions)
    with pytest.raises(ValueError, match="outside the source sentence of 2 words"):
        oracle_xl_positions_batch([[(2, 0)]], [2])


# ---------------------------------------------------------------- BTG check and repair


def test_btg_reachability_is_pattern_avoidance():
    for n in range(7):
        for perm in itertools.permutations(range(n)):
            assert is_btg_reachable(perm) == (not contains_2413_or_3142(perm)), perm


def test_repair_is_nearest_btg_order():
    for n in range(4, 7):
        perms = list(itertools.permutations(range(n)))
        reachable = [p for p in perms if is_btg_reachable(p)]
        for perm in perms:
            repaired, changed = repair_btg(perm)
            assert changed == (not is_btg_reachable(perm))
            assert is_btg_reachable(repaired) and sorted(repaired) == list(range(n))
            if changed:
                assert discordant_pairs(perm, repaired) == min(discordant_pairs(perm, q) for q in reachable)
            else:
                assert repaired == list(perm)


def test_repair_of_many_irreducible_blocks_uses_the_greedy_fold():
    n = 40  # 1 3 5 ... 0 2 4 ...: no two neighbours merge, 40 blocks > the exact-CKY limit
    perm = [2 * k + 1 for k in range(n // 2)] + [2 * k for k in range(n // 2)]
    repaired, changed = repair_btg(perm)
    assert changed and is_btg_reachable(repaired) and sorted(repaired) == list(range(n))
    assert kendall_tau(repaired, perm) > 0  # still closer to the input than to its reversal


# ---------------------------------------------------------------- sub-word projection


@st.composite
def words_and_pieces(draw):
    n = draw(st.integers(0, 12))
    perm = draw(st.permutations(list(range(n))))
    pieces = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    word_ids = [w for w in range(n) for _ in range(pieces[w])] + [None]  # + </s>
    if draw(st.booleans()):
        word_ids = [None] + word_ids  # a leading special token (language tag) too
    return list(perm), word_ids


@settings(deadline=None, max_examples=300)
@given(words_and_pieces())
def test_subword_projection_keeps_words_contiguous(case):
    word_positions, word_ids = case
    token_positions = project_positions_to_subwords(word_positions, word_ids)
    assert sorted(token_positions) == list(range(len(word_ids)))
    for t, w in enumerate(word_ids):
        if w is None:
            assert token_positions[t] == t  # special tokens keep their place
    for w in set(word_ids) - {None}:
        slots = [token_positions[t] for t, v in enumerate(word_ids) if v == w]
        assert slots == list(range(slots[0], slots[0] + len(slots)))  # contiguous, internal order kept
    # words appear in XL order
    first_slot = {w: min(p for p, v in zip(token_positions, word_ids) if v == w) for w in set(word_ids) - {None}}
    assert sorted(first_slot, key=first_slot.get) == sorted(first_slot, key=lambda w: word_positions[w])


def test_subword_projection_example():
    # words: "a" "bc"(2 pieces) "d"; XL order: d a bc
    assert project_positions_to_subwords([1, 2, 0], [0, 1, 1, 2, None]) == [1, 2, 3, 0, 4]


# ---------------------------------------------------------------- DPE target positions


def test_dpe_rules():
    # words: w0 w1 w2 w3, pieces: w1 has 2; </s> at the end. Links: w0 -> 2, 3 (one-to-many: first = 2),
    # w1 -> 0, w2 unaligned, w3 -> 0 (many-to-one with w1: together, source order kept)
    links = [(0, 2), (0, 3), (1, 0), (3, 0)]
    word_ids = [0, 1, 1, 2, 3, None]
    # target order of aligned tokens: w1a w1b w3 w0 -> ranks 0 1 2 3; w2 and </s>: no supervision
    assert dpe_target_positions(links, 4, word_ids) == [3, 0, 1, IGNORE_INDEX, 2, IGNORE_INDEX]
    # paper prose: unaligned w2 keeps index 3, the aligned tokens fill 0, 1, 2, 4 in target order
    assert dpe_target_positions(links, 4, word_ids, unaligned="keep") == [4, 0, 1, 3, 2, IGNORE_INDEX]
    with pytest.raises(ValueError, match="outside the source sentence"):
        dpe_target_positions([(4, 0)], 4, word_ids)


# ---------------------------------------------------------------- noise attack


def test_noise_swaps_the_requested_fraction():
    positions = list(range(100))
    noisy = add_reordering_noise(positions, 0.2, np.random.default_rng(3))
    assert sorted(noisy) == positions
    assert sum(a != b for a, b in zip(noisy, positions)) == 20
    assert noisy == add_reordering_noise(positions, 0.2, np.random.default_rng(3))  # seeded
    assert add_reordering_noise(positions, 0.0, np.random.default_rng(3)) == positions
    kept = add_reordering_noise(positions, 1.0, np.random.default_rng(0), fixed=[99])
    assert kept[99] == 99 and sorted(kept) == positions
    with pytest.raises(ValueError):
        add_reordering_noise(positions, 1.5, np.random.default_rng(0))


@pytest.mark.parametrize("ratio", [0.05, 0.1, 0.15, 0.2])
@pytest.mark.parametrize("length", [7, 12, 30])
def test_noise_fraction_is_unbiased_on_short_sentences(ratio, length):
    """Over a corpus the touched fraction is the ratio, also where ratio * length < 2 (a rounded-down count
    would leave every 12-word sentence untouched at 5%)."""
    rng = np.random.default_rng([7, length])
    positions = list(range(length))
    touched = [sum(a != b for a, b in zip(add_reordering_noise(positions, ratio, rng), positions)) for _ in range(4000)]
    assert all(t % 2 == 0 for t in touched)  # swaps of distinct indices
    assert abs(np.mean(touched) / length - ratio) < 0.01


# ---------------------------------------------------------------- scores


def test_kendall_tau_and_fuzzy_reordering_score():
    assert kendall_tau([0, 1, 2, 3]) == 1.0
    assert kendall_tau([3, 2, 1, 0]) == -1.0
    assert kendall_tau([1, 0, 2, 3]) == pytest.approx(1 - 4 * 1 / 12)
    assert kendall_tau([3, 2, 1, 0], normalized=True) == 0.0
    assert kendall_tau([0]) == 1.0
    long = np.random.default_rng(0).permutation(700)  # beyond 512 items: the Fenwick-tree count
    inversions = int(np.triu(long[:, None] > long[None, :], 1).sum())
    assert kendall_tau(long) == pytest.approx(1 - 4 * inversions / (700 * 699))
    assert kendall_tau([2, 0, 1], reference=[2, 0, 1]) == 1.0
    assert fuzzy_reordering_score([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert fuzzy_reordering_score([3, 2, 1, 0], [0, 1, 2, 3]) == 0.0
    # predicted order w2 w3 w0 w1 vs monotone: chunks [w2 w3] [w0 w1] -> 1 - (2 - 1) / 3
    assert fuzzy_reordering_score([2, 3, 0, 1], [0, 1, 2, 3]) == pytest.approx(2 / 3)


# ---------------------------------------------------------------- flat batch versions == per-sentence functions


@st.composite
def flat_sentence(draw, irregular: bool = True):
    """One sentence for the flat functions: XL positions of its words (a permutation, or any small integers with
    ties), its tokens' word ids (the pieces of each word together, 0-3 pieces, special tokens (None) anywhere),
    links. `irregular`: sometimes word ids out of order or naming the word one past the end (the cases the
    flat functions hand to the per-sentence ones)."""
    n = draw(st.integers(0, 8))
    if draw(st.booleans()):
        positions = draw(st.permutations(list(range(n))))
    else:
        positions = draw(st.lists(st.integers(0, n + 2), min_size=n, max_size=n))
    pieces = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    word_ids = [w for w in range(n) for _ in range(pieces[w])]
    for _ in range(draw(st.integers(0, 2))):
        word_ids.insert(draw(st.integers(0, len(word_ids))), None)
    if irregular and word_ids and draw(st.integers(0, 9)) == 0:
        kind = draw(st.sampled_from(["shuffle", "one past the end"]))
        if kind == "shuffle":
            word_ids = draw(st.permutations(word_ids))
        else:
            word_ids[draw(st.integers(0, len(word_ids) - 1))] = n
    cells = [(i, j) for i in range(n) for j in range(6)]
    links = draw(st.lists(st.sampled_from(cells), max_size=2 * n)) if cells else []
    return list(positions), word_ids, links, n


def flatten_sentences(sentences):
    """(word positions, word offsets, token word ids (-1 special), token offsets, link sentence/source/target)."""
    word_counts = [n for _, _, _, n in sentences]
    token_counts = [len(ids) for _, ids, _, _ in sentences]
    links = [(s, i, j) for s, (_, _, pair_links, _) in enumerate(sentences) for i, j in pair_links]
    link_sentence, link_source, link_target = (
        (np.array(column, dtype=np.int64) for column in zip(*links)) if links else (np.zeros(0, dtype=np.int64),) * 3
    )
    return (
        np.array([p for positions, _, _, _ in sentences for p in positions], dtype=np.int64),
        np.r_[0, np.cumsum(word_counts, dtype=np.int64)],
        np.array([-1 if w is None else w for _, ids, _, _ in sentences for w in ids], dtype=np.int64),
        np.r_[0, np.cumsum(token_counts, dtype=np.int64)],
        link_sentence,
        link_source,
        link_target,
    )


def per_sentence_or_error(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (ValueError, IndexError) as error:
        return type(error)


@settings(deadline=None, max_examples=400)
@given(st.lists(flat_sentence(), max_size=6))
def test_flat_subword_projection_equals_the_per_sentence_one(sentences):
    positions, word_offsets, word_ids, token_offsets, *_ = flatten_sentences(sentences)
    expected = [per_sentence_or_error(project_positions_to_subwords, p, ids) for p, ids, _, _ in sentences]
    errors = [e for e in expected if isinstance(e, type)]
    if errors:
        with pytest.raises(errors[0]):
            project_positions_to_subwords_flat(positions, word_offsets, word_ids, token_offsets)
        return
    result = project_positions_to_subwords_flat(positions, word_offsets, word_ids, token_offsets)
    assert result.dtype == np.int64
    assert [result[a:b].tolist() for a, b in itertools.pairwise(token_offsets)] == expected


@settings(deadline=None, max_examples=400)
@given(st.lists(flat_sentence(), max_size=6), st.sampled_from(["drop", "keep"]))
def test_flat_dpe_targets_equal_the_per_sentence_ones(sentences, unaligned):
    _, word_offsets, word_ids, token_offsets, *links = flatten_sentences(sentences)
    expected = [dpe_target_positions(pair_links, n, ids, unaligned=unaligned) for _, ids, pair_links, n in sentences]
    result = dpe_target_positions_flat(*links, word_offsets, word_ids, token_offsets, unaligned=unaligned)
    assert [result[a:b].tolist() for a, b in itertools.pairwise(token_offsets)] == expected


def test_flat_dpe_targets_check_links_like_the_per_sentence_ones():
    word_ids, token_offsets = np.array([0, 1, -1, 0, -1]), np.array([0, 3, 5])
    for link in ((1, 2, 0), (1, -1, 0), (0, 0, -3)):  # sentence 1 has one word; a negative index
        links = [np.array([0, link[0]]), np.array([1, link[1]]), np.array([0, link[2]])]
        with pytest.raises(ValueError) as flat_error:
            dpe_target_positions_flat(*links, np.array([0, 2, 3]), word_ids, token_offsets)
        s = link[0]
        pair = [(links[1][k], links[2][k]) for k in range(2) if links[0][k] == s]
        with pytest.raises(ValueError) as error:
            dpe_target_positions(pair, [2, 1][s], [[0, 1, None], [0, None]][s])
        assert str(flat_error.value) == str(error.value)
    check_links_flat(np.array([0, 1]), np.array([1, 0]), np.array([5, 0]), np.array([0, 2, 3]))  # all inside


@settings(deadline=None, max_examples=300)
@given(st.lists(st.integers(0, 40).flatmap(lambda n: st.permutations(list(range(n)))), max_size=12))
def test_flat_kendall_tau_equals_the_per_sentence_one(perms):
    offsets = np.r_[0, np.cumsum([len(p) for p in perms], dtype=np.int64)]
    flat = np.array([v for p in perms for v in p], dtype=np.int64)
    assert kendall_tau_flat(flat, offsets).tolist() == [kendall_tau(p) for p in perms]  # exactly equal floats


def test_flat_kendall_tau_of_long_and_many_sentences():
    rng = np.random.default_rng(5)
    perms = [rng.permutation(n) for n in (700, 3, 513, 512, 0, 1, 2)] + [rng.permutation(30) for _ in range(5000)]
    offsets = np.r_[0, np.cumsum([len(p) for p in perms], dtype=np.int64)]
    assert kendall_tau_flat(np.concatenate(perms), offsets).tolist() == [kendall_tau(p) for p in perms]


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.5, 1.0])
def test_noise_in_place_on_a_slice_of_a_batch_equals_add_reordering_noise(ratio):
    rng = np.random.default_rng(1)
    perms = [rng.permutation(n).tolist() for n in (1, 2, 5, 13, 40, 0)]
    flat = np.array([v for p in perms for v in p], dtype=np.int64)
    offsets = np.r_[0, np.cumsum([len(p) for p in perms])]
    for s, line in enumerate([3, 8, 11, 12, 20, 21]):
        swap_noise_in_place(flat[offsets[s] : offsets[s + 1]], ratio, np.random.default_rng([4, line]))
    expected = [
        add_reordering_noise(p, ratio, np.random.default_rng([4, line]))
        for p, line in zip(perms, [3, 8, 11, 12, 20, 21])
    ]
    assert [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)] == expected
