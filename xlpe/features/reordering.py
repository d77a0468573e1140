"""Oracle BTG reorderings from word alignments, their sub-word projection, DPE target ranks, and scores.

XL PE (Ding et al. 2020, Sec. 3.1, Eq. 6) feeds the encoder `PE_XL = f(BTG(X))`: the index of every source word
in the source sentence reordered to target order (Fig. 1b: abs 0 1 2 3 4 5 -> XL 0 3 4 5 1 2). At training time
that order is the *oracle* of a BTG preorderer (Neubig et al. 2012, "lader"), read off the word alignment:

  1. every source word gets the target span [min j, max j] of its links;
  2. an unaligned word copies the span of its right neighbour (trailing unaligned words: of the left one);
     `unaligned="left"` mirrors this;
  3. words whose spans overlap are merged into one block (the block's span is the union);
  4. blocks are ranked densely by span (disjoint after merging, so "l < r iff l begins or ends earlier and r
     does neither" is just "l begins earlier"); words of one block tie;
  5. the reordered sentence is the stable sort by rank; a word's XL position is its index there.

Step 3 removes overlaps but not crossing patterns: the result can still contain 2413 or 3142, which no BTG
tree derives (Wu 1997). `repair_btg` then returns the nearest BTG-reachable order: the fewest word pairs
ordered differently from the alignment order (checked exhaustively against brute force up to 7 words in
the tests; exact up to 16 irreducible blocks, a greedy fold beyond), and the batch oracle counts repairs.

Everything per sentence is O(n log n): the oracle is vectorised with numpy over a whole batch of sentences
(sorting dominates); the BTG check is the linear shift-reduce recogniser of separable permutations and runs
in Python only on the sentences whose order has an inseparable-looking core (a direct-sum component of 4+).
The sub-word projection, the DPE targets and Kendall's tau also come in `_flat` versions for a whole batch
(flat arrays + offsets, what the feature step uses), equal sentence by sentence to the plain functions (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100  # "no supervision" in `target_positions` (the value CrossEntropy/MSE masks skip)
_EXACT_REPAIR_MAX_BLOCKS = 16  # CKY over at most this many irreducible blocks, greedy beyond (keeps O(n log n))


# ----------------------------------------------------------------------------------------------------------
# BTG reachability (separable permutations) and repair
# ----------------------------------------------------------------------------------------------------------


def _shift_reduce_blocks(perm: Sequence[int]) -> list[tuple[int, int]]:
    """Greedy shift-reduce over `perm` (distinct integers, in source order); the blocks left on the stack.

    A block is (lowest value, highest value) and holds exactly the values in between. Neighbouring blocks whose
    value ranges touch are merged (a straight or inverted BTG node). `perm` is BTG-reachable iff one block is
    left; the greedy merges are safe for separable permutations (Zhang, Gildea & Huang 2008). O(n).
    """
    lows: list[int] = []
    highs: list[int] = []
    for value in perm:
        low = high = int(value)
        while lows:
            if highs[-1] + 1 == low:  # straight: the stack top comes right before this block in target order
                low = lows.pop()
                highs.pop()
            elif high + 1 == lows[-1]:  # inverted: right after it
                high = highs.pop()
                lows.pop()
            else:
                break
        lows.append(low)
        highs.append(high)
    return list(zip(lows, highs))


def is_btg_reachable(perm: Sequence[int]) -> bool:
    """True iff the permutation is derivable by a BTG tree, i.e. contains neither 2413 nor 3142 (Wu 1997)."""
    return len(perm) == 0 or len(_shift_reduce_blocks(perm)) == 1


def _exact_block_order(lows: list[int], sizes: list[int]) -> list[int]:
    """CKY over irreducible blocks: the bracketing (straight/inverted) with fewest discordant word pairs."""
    k = len(lows)
    # crossed[a, b] (a < b): word pairs of blocks a, b that a straight node would misorder; kept[a, b]: inverted.
    pair = np.outer(sizes, sizes)
    later = np.triu(np.ones((k, k), dtype=bool), 1)
    crossed = np.where(later & (np.array(lows)[:, None] > np.array(lows)[None, :]), pair, 0)
    kept = np.where(later, pair, 0) - crossed
    # 2-D prefix sums so that the cost of joining [i, m) with [m, j) is O(1).
    pc = np.zeros((k + 1, k + 1), dtype=np.int64)
    pk = np.zeros((k + 1, k + 1), dtype=np.int64)
    pc[1:, 1:] = crossed.cumsum(0).cumsum(1)
    pk[1:, 1:] = kept.cumsum(0).cumsum(1)

    def rect(p, i, m, j):  # rows [i, m), columns [m, j)
        return int(p[m, j] - p[i, j] - p[m, m] + p[i, m])

    best = {(i, i + 1): (0, None) for i in range(k)}
    for width in range(2, k + 1):
        for i in range(0, k - width + 1):
            j = i + width
            choice = None
            for m in range(i + 1, j):
                inner = best[(i, m)][0] + best[(m, j)][0]
                for inverted, cost in ((False, rect(pc, i, m, j)), (True, rect(pk, i, m, j))):
                    if choice is None or inner + cost < choice[0]:
                        choice = (inner + cost, (m, inverted))
            best[(i, j)] = choice

    def yield_order(i, j):
        if j - i == 1:
            return [i]
        m, inverted = best[(i, j)][1]
        left, right = yield_order(i, m), yield_order(m, j)
        return right + left if inverted else left + right

    return yield_order(0, k)


class _FenwickTree:
    """Prefix sums with point updates in O(log n) (used for weighted inversion counts)."""

    def __init__(self, size: int):
        self.tree = [0] * (size + 1)

    def add(self, index: int, weight: int) -> None:
        index += 1
        while index < len(self.tree):
            self.tree[index] += weight
            index += index & -index

    def prefix_sum(self, index: int) -> int:  # sum of weights at indices < index
        total = 0
        while index > 0:
            total += self.tree[index]
            index -= index & -index
        return total


def _greedy_block_order(lows: list[int], sizes: list[int]) -> list[int]:
    """Right-to-left folding: put each block before (straight) or after (inverted) the already folded blocks,
    whichever misorders fewer word pairs; the counts come from a Fenwick tree, so O(k log k)."""
    rank_of_low = {low: r for r, low in enumerate(sorted(lows))}
    folded = _FenwickTree(len(lows))
    folded.add(rank_of_low[lows[-1]], sizes[-1])
    total = sizes[-1]
    before, after = [], []  # the fold is before[::-1] + [last block] + after
    for a in range(len(lows) - 2, -1, -1):
        below = folded.prefix_sum(rank_of_low[lows[a]])  # folded words that precede block a in target order
        (before if below <= total - below else after).append(a)
        folded.add(rank_of_low[lows[a]], sizes[a])
        total += sizes[a]
    return before[::-1] + [len(lows) - 1] + after


def repair_btg(perm: Sequence[int]) -> tuple[list[int], bool]:
    """Nearest BTG-reachable permutation to `perm` and whether `perm` had to change.

    The shift-reduce pass reduces `perm` to irreducible blocks (each contiguous in source and target order, so
    BTG-derivable inside). They are then bracketed with the fewest discordant word pairs with `perm` (exact CKY
    for up to 16 blocks, a constant; greedy folding beyond), so the whole repair stays O(n log n). Inside a
    block the order of `perm` is kept. Element i of the result is the new position of word i.
    """
    perm = [int(v) for v in perm]
    blocks = _shift_reduce_blocks(perm)
    if len(blocks) <= 1:
        return perm, False
    lows = [low for low, _ in blocks]
    sizes = [high - low + 1 for low, high in blocks]
    if len(blocks) <= _EXACT_REPAIR_MAX_BLOCKS:
        block_order = _exact_block_order(lows, sizes)
    else:
        block_order = _greedy_block_order(lows, sizes)
    new_start = {}
    cursor = 0
    for b in block_order:
        new_start[b] = cursor
        cursor += sizes[b]
    repaired, start = [], 0
    for b, (low, size) in enumerate(zip(lows, sizes)):  # blocks are consecutive source ranges, in order
        repaired.extend(new_start[b] + perm[i] - low for i in range(start, start + size))
        start += size
    return repaired, True


# ----------------------------------------------------------------------------------------------------------
# The oracle, vectorised over a batch of sentences
# ----------------------------------------------------------------------------------------------------------


@dataclass
class OracleBatch:
    """XL positions of a batch of sentences, flat: sentence s owns `positions[offsets[s]:offsets[s + 1]]`."""

    positions: np.ndarray  # int64, element = XL position of that word within its sentence
    offsets: np.ndarray  # int64, (N + 1,)
    repaired: np.ndarray  # bool (N,): the alignment order was not BTG-reachable and was repaired
    unaligned_words: np.ndarray  # int64 (N,): source words without any link (before attachment)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, s: int) -> np.ndarray:
        return self.positions[self.offsets[s] : self.offsets[s + 1]]

    def to_lists(self) -> list[list[int]]:
        flat = self.positions.tolist()
        bounds = self.offsets.tolist()
        return [flat[bounds[s] : bounds[s + 1]] for s in range(len(self))]


def oracle_xl_positions_flat(
    link_sentence: np.ndarray,
    link_source: np.ndarray,
    link_target: np.ndarray,
    source_lengths: np.ndarray,
    unaligned: str = "right",
    repair: bool = True,
) -> OracleBatch:
    """The lader oracle (module docstring, steps 1-5) for many sentences at once, from flat link arrays.

    Args:
        link_sentence, link_source, link_target: one entry per link: sentence index, source word i, target
            word j (0-based, already validated against the sentence lengths).
        source_lengths: words per source sentence.
        unaligned: "right" (lader's default) or "left": which neighbour an unaligned word attaches to.
        repair: make every order BTG-reachable (`repair_btg`); False leaves the raw alignment order.
    """
    if unaligned not in ("right", "left"):
        raise ValueError(f"unaligned must be 'right' or 'left', got {unaligned!r}")
    source_lengths = np.asarray(source_lengths, dtype=np.int64)
    num_sentences = len(source_lengths)
    offsets = np.zeros(num_sentences + 1, dtype=np.int64)
    np.cumsum(source_lengths, out=offsets[1:])
    num_words = int(offsets[-1])
    word_sentence = np.repeat(np.arange(num_sentences, dtype=np.int64), source_lengths)
    word_index = np.arange(num_words, dtype=np.int64)

    # 1. target span of every word (sorting links by word, then reduceat: faster than ufunc.at).
    link_word = offsets[np.asarray(link_sentence, dtype=np.int64)] + np.asarray(link_source, dtype=np.int64)
    link_target = np.asarray(link_target, dtype=np.int64)
    span_begin = np.full(num_words, -1, dtype=np.int64)
    span_end = np.full(num_words, -1, dtype=np.int64)
    if len(link_word):
        by_word = np.lexsort((link_target, link_word))
        sorted_words, sorted_targets = link_word[by_word], link_target[by_word]
        first = np.flatnonzero(np.r_[True, sorted_words[1:] != sorted_words[:-1]])
        last = np.r_[first[1:] - 1, len(sorted_words) - 1]
        span_begin[sorted_words[first]] = sorted_targets[first]
        span_end[sorted_words[first]] = sorted_targets[last]
    aligned = span_begin >= 0
    unaligned_words = np.bincount(word_sentence[~aligned], minlength=num_sentences).astype(np.int64)

    # 2. attach unaligned words to the nearest aligned word on the chosen side (else the other side).
    sentence_start, sentence_end = offsets[word_sentence], offsets[word_sentence + 1]
    next_aligned = np.minimum.accumulate(np.where(aligned, word_index, num_words)[::-1])[::-1]
    prev_aligned = np.maximum.accumulate(np.where(aligned, word_index, -1))
    has_next = next_aligned < sentence_end
    has_prev = prev_aligned >= sentence_start
    if unaligned == "right":
        donor = np.where(has_next, next_aligned, np.where(has_prev, prev_aligned, word_index))
    else:
        donor = np.where(has_prev, prev_aligned, np.where(has_next, next_aligned, word_index))
    begin = np.maximum(span_begin[donor], 0)  # a wholly unaligned sentence is one block at 0: monotone
    end = np.maximum(span_end[donor], 0)

    # 3./4. merge overlapping spans: sweep words by (sentence, begin); a block starts where the begin passes
    # the running maximum end. Keys offset by sentence keep the running maximum inside each sentence.
    stride = int(max(int(end.max(initial=0)) + 2, 2))
    begin_key = word_sentence * stride + begin
    end_key = word_sentence * stride + end
    sweep = np.lexsort((word_index, begin_key))
    running_end = np.maximum.accumulate(end_key[sweep])
    starts_block = np.r_[True, begin_key[sweep][1:] > running_end[:-1]]
    block_of_word = np.empty(num_words, dtype=np.int64)
    block_of_word[sweep] = np.cumsum(starts_block)  # globally increasing, so also a dense rank per sentence

    # 5. stable sort by block rank; XL position = index in that order, relative to the sentence start.
    reordered = np.lexsort((word_index, block_of_word))
    positions = np.empty(num_words, dtype=np.int64)
    positions[reordered] = word_index
    positions -= offsets[word_sentence]

    repaired = np.zeros(num_sentences, dtype=bool)
    if repair and num_words:
        components = _components_needing_btg_check(positions, word_sentence, offsets)
        as_list = positions.tolist() if components else []
        for s, start, stop in components:
            component = as_list[start:stop]
            if len(_shift_reduce_blocks(component)) > 1:  # the linear check first; repair only if needed
                low = min(component)
                fixed, _ = repair_btg([v - low for v in component])
                positions[start:stop] = np.asarray(fixed) + low
                repaired[s] = True
    return OracleBatch(positions, offsets, repaired, unaligned_words)


def _components_needing_btg_check(positions, word_sentence, offsets) -> list[tuple[int, int, int]]:
    """(sentence, start, stop) of every direct-sum component of 4+ words (a word range whose positions are
    exactly that range). A permutation is BTG-reachable iff all its components are, every permutation of <= 3
    items is, and the nearest repair never crosses component boundaries, so only these are checked."""
    local_index = np.arange(len(positions), dtype=np.int64) - offsets[word_sentence]
    stride = int(offsets[-1]) + 1
    prefix_max = np.maximum.accumulate(word_sentence * stride + positions) - word_sentence * stride
    stops = np.flatnonzero(prefix_max == local_index) + 1  # a component ends at each of these (global) indices
    starts = np.r_[0, stops[:-1]]
    big = np.flatnonzero(stops - starts >= 4)
    return list(zip(word_sentence[starts[big]].tolist(), starts[big].tolist(), stops[big].tolist()))


def _links_to_flat(links_per_sentence: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrays = [np.asarray(links, dtype=np.int64).reshape(-1, 2) for links in links_per_sentence]
    counts = np.array([len(a) for a in arrays], dtype=np.int64)
    stacked = np.concatenate(arrays) if arrays else np.zeros((0, 2), dtype=np.int64)
    return np.repeat(np.arange(len(arrays), dtype=np.int64), counts), stacked[:, 0], stacked[:, 1]


def oracle_xl_positions_batch(
    links_per_sentence: Sequence, source_lengths: Sequence[int], unaligned: str = "right", repair: bool = True
) -> OracleBatch:
    """`oracle_xl_positions` for many sentences (links: per sentence a list of (i, j) pairs or a flat
    [i0, j0, i1, j1, ...] list). Validates that every link lies inside its source sentence."""
    sentence, source, target = _links_to_flat(links_per_sentence)
    lengths = np.asarray(source_lengths, dtype=np.int64)
    bad = (source < 0) | (target < 0) | (source >= lengths[sentence] if len(sentence) else False)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"sentence {int(sentence[k])}: link {int(source[k])}-{int(target[k])} is outside the source "
            f"sentence of {int(lengths[sentence[k]])} words"
        )
    return oracle_xl_positions_flat(sentence, source, target, lengths, unaligned=unaligned, repair=repair)


def oracle_xl_positions(links, src_len: int, unaligned: str = "right", repair: bool = True) -> list[int]:
    """XL position of every source word (XL PE Fig. 1b) from Pharaoh links [(i, j), ...] (0-based).

    Always a BTG-reachable permutation of 0..src_len-1 (unless `repair=False`). See the module docstring for
    the rules; `oracle_xl_positions_batch` does the same for many sentences at once.
    """
    return oracle_xl_positions_batch([links], [src_len], unaligned=unaligned, repair=repair)[0].tolist()


# ----------------------------------------------------------------------------------------------------------
# Sub-word projection and DPE target ranks
# ----------------------------------------------------------------------------------------------------------


def _word_piece_layout(word_ids: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token word ids as an array (-1 = special token), the indices of word tokens, and their word ids."""
    ids = np.array([-1 if w is None else w for w in word_ids], dtype=np.int64)
    word_slots = np.flatnonzero(ids >= 0)
    return ids, word_slots, ids[word_slots]


def project_positions_to_subwords(word_positions: Sequence[int], word_ids: Sequence[int | None]) -> list[int]:
    """Token-level `reorder_positions` from word-level XL positions.

    The pieces of a word move together and keep their internal order; special tokens (word id None, e.g. the
    final </s>) keep their own index; word tokens fill the remaining indices in the reordered word order.
    Requires the pieces of each word to be contiguous (true for `word_ids()` of a fast tokenizer). Returns a
    permutation of 0..len(word_ids)-1.
    """
    ids, word_slots, token_words = _word_piece_layout(word_ids)
    word_positions = np.asarray(word_positions, dtype=np.int64)
    if len(token_words) and token_words.max() >= len(word_positions):
        raise ValueError(f"word id {int(token_words.max())} but only {len(word_positions)} word positions")
    pieces = np.bincount(token_words, minlength=len(word_positions))
    words_in_xl_order = np.argsort(word_positions, kind="stable")
    start_in_xl_order = np.empty(len(word_positions), dtype=np.int64)
    start_in_xl_order[words_in_xl_order] = np.cumsum(pieces[words_in_xl_order]) - pieces[words_in_xl_order]
    piece_index = np.arange(len(token_words)) - np.searchsorted(token_words, token_words)  # k-th piece of word
    rank = start_in_xl_order[token_words] + piece_index
    result = np.arange(len(ids), dtype=np.int64)
    result[word_slots] = word_slots[rank]
    return result.tolist()


def word_positions_from_tokens(
    token_positions: Sequence[int], word_ids: Sequence[int | None], num_words: int
) -> list[int]:
    """Word-level XL positions from token-level ones (the inverse of `project_positions_to_subwords` when each
    word's pieces are contiguous): words are ranked by the smallest position of their pieces; a word with no
    piece (possible only with a lossy tokenizer) keeps its relative source order after the others' ranks."""
    ids, word_slots, token_words = _word_piece_layout(word_ids)
    first = np.full(num_words, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, token_words, np.asarray(token_positions, dtype=np.int64)[word_slots])
    ranks = np.empty(num_words, dtype=np.int64)
    ranks[np.argsort(first, kind="stable")] = np.arange(num_words)
    return ranks.tolist()


def dpe_target_positions(
    links, num_source_words: int, word_ids: Sequence[int | None], unaligned: str = "drop"
) -> list[int]:
    """Per source token, the DPE order target (DPE Sec. 3.1 rules, Eq. 1 supervision), -100 = no supervision.

    One-to-many: a source word takes its first (smallest) linked target index. Many-to-one and sub-words:
    tokens are stably sorted by that index, so they move together keeping their relative order.
    `unaligned="drop"` (default, as the public DPE code): aligned tokens are renumbered densely
    0..#aligned-1, unaligned tokens get -100 (no loss). `unaligned="keep"` (the paper's prose: "we do not
    change their position"): unaligned tokens keep their own index as target, aligned tokens fill the other
    indices in target order. Special tokens always get -100.
    """
    if unaligned not in ("drop", "keep"):
        raise ValueError(f"unaligned must be 'drop' or 'keep', got {unaligned!r}")
    links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
    if len(links) and (links.min() < 0 or links[:, 0].max() >= num_source_words):
        raise ValueError(f"a link lies outside the source sentence of {num_source_words} words: {links.tolist()}")
    first_target = np.full(num_source_words + 1, np.iinfo(np.int64).max, dtype=np.int64)  # last slot: special
    np.minimum.at(first_target, links[:, 0], links[:, 1])
    ids, word_slots, token_words = _word_piece_layout(word_ids)
    token_key = first_target[np.where(ids >= 0, ids, num_source_words)]
    aligned_tokens = np.flatnonzero(token_key != np.iinfo(np.int64).max)
    in_target_order = aligned_tokens[np.argsort(token_key[aligned_tokens], kind="stable")]
    result = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
    if unaligned == "drop":
        result[in_target_order] = np.arange(len(in_target_order))
    else:
        unaligned_tokens = np.setdiff1d(word_slots, aligned_tokens)
        result[unaligned_tokens] = unaligned_tokens
        free_slots = np.setdiff1d(word_slots, unaligned_tokens)  # sorted
        result[in_target_order] = free_slots
    return result.tolist()


def _token_layout(word_ids: np.ndarray, token_offsets: np.ndarray, word_offsets: np.ndarray):
    """Per flat token: its sentence, whether it belongs to a word, that word's flat index (-1 for special
    tokens), and whether its word id lies beyond its sentence's words (left to the per-sentence functions)."""
    token_sentence = np.repeat(np.arange(len(token_offsets) - 1, dtype=np.int64), np.diff(token_offsets))
    is_word = word_ids >= 0
    out_of_range = is_word & (word_ids >= (word_offsets[1:] - word_offsets[:-1])[token_sentence])
    flat_word = np.where(is_word, word_offsets[token_sentence] + word_ids, -1)
    return token_sentence, is_word, flat_word, out_of_range


def _sentences_with(mask: np.ndarray, token_sentence: np.ndarray) -> np.ndarray:
    return np.unique(token_sentence[mask])


def project_positions_to_subwords_flat(
    word_positions: np.ndarray, word_offsets: np.ndarray, word_ids: np.ndarray, token_offsets: np.ndarray
) -> np.ndarray:
    """`project_positions_to_subwords` for a whole batch in one numpy pass; equal to it sentence by sentence.

    Flat layout: sentence s owns words `word_offsets[s]:word_offsets[s + 1]` (their XL positions in
    `word_positions`) and tokens `token_offsets[s]:token_offsets[s + 1]` (their word ids in `word_ids`, -1 for
    special tokens). Returns the token-level positions, flat like `word_ids`. Sentences whose word ids are not
    non-decreasing (pieces of a word apart) or name a word the sentence lacks go through the per-sentence
    function (which defines the result, or raises)."""
    word_positions = np.asarray(word_positions, dtype=np.int64)
    word_offsets, token_offsets = np.asarray(word_offsets, np.int64), np.asarray(token_offsets, np.int64)
    word_ids = np.asarray(word_ids, dtype=np.int64)
    token_sentence, is_word, flat_word, out_of_range = _token_layout(word_ids, token_offsets, word_offsets)
    word_slots = np.flatnonzero(is_word)  # flat token index of every word token, sentence by sentence
    token_words = flat_word[word_slots]  # their flat word index: non-decreasing when every sentence's ids are
    decreasing = np.zeros(len(word_ids), dtype=bool)
    decreasing[word_slots[1:]] = token_words[1:] < token_words[:-1]
    irregular = _sentences_with(out_of_range | decreasing, token_sentence)
    if len(irregular):  # compute the rest as if those sentences had no word tokens
        regular = ~np.isin(token_sentence[word_slots], irregular)
        word_slots, token_words = word_slots[regular], token_words[regular]
    word_sentence = np.repeat(np.arange(len(word_offsets) - 1, dtype=np.int64), np.diff(word_offsets))
    pieces = np.bincount(token_words, minlength=len(word_positions))
    words_in_xl_order = np.lexsort((word_positions, word_sentence))  # stable: ties keep the source order
    start_in_xl_order = np.empty(len(word_positions), dtype=np.int64)
    start_in_xl_order[words_in_xl_order] = np.cumsum(pieces[words_in_xl_order]) - pieces[words_in_xl_order]
    piece_index = np.arange(len(token_words)) - np.searchsorted(token_words, token_words)  # k-th piece of word
    result = np.arange(len(word_ids), dtype=np.int64) - token_offsets[token_sentence]
    result[word_slots] = result[word_slots[start_in_xl_order[token_words] + piece_index]]
    for s in irregular.tolist():
        tokens, words = slice(token_offsets[s], token_offsets[s + 1]), slice(word_offsets[s], word_offsets[s + 1])
        result[tokens] = project_positions_to_subwords(word_positions[words], _none_for_special(word_ids[tokens]))
    return result


def _none_for_special(word_ids: np.ndarray) -> list[int | None]:
    return [None if w < 0 else w for w in word_ids.tolist()]


def check_links_flat(
    link_sentence: np.ndarray, link_source: np.ndarray, link_target: np.ndarray, word_offsets: np.ndarray
) -> None:
    """Raise `dpe_target_positions`'s ValueError for the first sentence with a link outside its source words
    (a negative index or a source word beyond the sentence)."""
    lengths = np.diff(word_offsets)
    bad = (link_source < 0) | (link_target < 0) | (link_source >= lengths[link_sentence])
    if np.any(bad):
        s = int(link_sentence[np.flatnonzero(bad)[0]])
        links = np.stack([link_source[link_sentence == s], link_target[link_sentence == s]], axis=1)
        raise ValueError(f"a link lies outside the source sentence of {int(lengths[s])} words: {links.tolist()}")


def dpe_target_positions_flat(
    link_sentence: np.ndarray,
    link_source: np.ndarray,
    link_target: np.ndarray,
    word_offsets: np.ndarray,
    word_ids: np.ndarray,
    token_offsets: np.ndarray,
    unaligned: str = "drop",
) -> np.ndarray:
    """`dpe_target_positions` (DPE Sec. 3.1 rules, Eq. 1 supervision) for a whole batch in one numpy pass;
    equal to it sentence by sentence. Links are flat (one entry per link: sentence, source word, target word);
    words and tokens are laid out as for `project_positions_to_subwords_flat`. Returns flat target ranks."""
    if unaligned not in ("drop", "keep"):
        raise ValueError(f"unaligned must be 'drop' or 'keep', got {unaligned!r}")
    link_sentence, link_source, link_target = (
        np.asarray(links, dtype=np.int64) for links in (link_sentence, link_source, link_target)
    )
    word_offsets, token_offsets = np.asarray(word_offsets, np.int64), np.asarray(token_offsets, np.int64)
    word_ids = np.asarray(word_ids, dtype=np.int64)
    check_links_flat(link_sentence, link_source, link_target, word_offsets)
    token_sentence, is_word, flat_word, out_of_range = _token_layout(word_ids, token_offsets, word_offsets)
    never = np.iinfo(np.int64).max
    first_target = np.full(int(word_offsets[-1]), never, dtype=np.int64)  # a word's first (smallest) target
    np.minimum.at(first_target, word_offsets[link_sentence] + link_source, link_target)
    token_key = np.full(len(word_ids), never, dtype=np.int64)  # special tokens: never aligned
    looked_up = is_word & ~out_of_range
    token_key[looked_up] = first_target[flat_word[looked_up]]
    aligned_tokens = np.flatnonzero(token_key != never)  # sentence by sentence, in token order
    aligned_sentence = token_sentence[aligned_tokens]
    in_target_order = aligned_tokens[np.lexsort((token_key[aligned_tokens], aligned_sentence))]  # stable
    local = np.arange(len(word_ids), dtype=np.int64) - token_offsets[token_sentence]
    result = np.full(len(word_ids), IGNORE_INDEX, dtype=np.int64)
    if unaligned == "drop":  # dense ranks 0..#aligned-1 per sentence
        first_aligned = np.searchsorted(aligned_sentence, aligned_sentence)  # aligned_sentence is sorted
        result[in_target_order] = np.arange(len(aligned_tokens)) - first_aligned
    else:  # unaligned word tokens keep their index; aligned ones fill the other word slots in target order
        unaligned_tokens = np.flatnonzero(is_word & (token_key == never))
        result[unaligned_tokens] = local[unaligned_tokens]
        result[in_target_order] = local[aligned_tokens]
    for s in _sentences_with(out_of_range, token_sentence).tolist():  # the per-sentence function decides
        tokens = slice(token_offsets[s], token_offsets[s + 1])
        pair_links = np.stack([link_source[link_sentence == s], link_target[link_sentence == s]], axis=1)
        result[tokens] = dpe_target_positions(
            pair_links,
            int(word_offsets[s + 1] - word_offsets[s]),
            _none_for_special(word_ids[tokens]),
            unaligned=unaligned,
        )
    return result


# ----------------------------------------------------------------------------------------------------------
# Noise attack (XL PE Sec. 4.5, Fig. 4)
# ----------------------------------------------------------------------------------------------------------


def add_reordering_noise(
    positions: Sequence[int], ratio: float, rng: np.random.Generator, fixed: Sequence[int] = ()
) -> list[int]:
    """Swap pairs of reorder indices (XL PE Sec. 4.5, footnote 4: "randomly swap two reordered positional
    indexes"); `ratio` is the expected fraction of (non-`fixed`) indices touched. A sentence of n movable
    indices gets ratio * n / 2 swapped pairs, rounded up or down at random in proportion (stochastic rounding),
    so that short sentences are not spared: rounding down would leave every sentence of fewer than 2 / ratio
    words untouched (no noise at all at 5% on Multi30k). The result is still a permutation; `fixed` indices
    (e.g. special tokens) are never touched."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"noise ratio must be in [0, 1], got {ratio}")
    noisy = np.array(positions, dtype=np.int64)
    swap_noise_in_place(noisy, ratio, rng, fixed)
    return noisy.tolist()


def swap_noise_in_place(noisy: np.ndarray, ratio: float, rng: np.random.Generator, fixed: Sequence[int] = ()) -> None:
    """`add_reordering_noise` on an int64 array (or a view of one, e.g. a sentence of a flat batch), in place;
    the same draws from `rng`, so the same result."""
    movable = np.arange(len(noisy))  # == np.setdiff1d(np.arange(len(noisy)), fixed) when nothing is fixed
    if len(fixed):
        movable = np.setdiff1d(movable, np.asarray(fixed, dtype=np.int64))
    expected_pairs = min(ratio * len(movable) / 2, len(movable) // 2)
    pairs = int(expected_pairs) + int(rng.random() < expected_pairs - int(expected_pairs))
    touched = 2 * pairs
    if touched:
        chosen = rng.choice(movable, size=touched, replace=False)
        first, second = chosen[0::2], chosen[1::2]
        noisy[first], noisy[second] = noisy[second], noisy[first].copy()


# ----------------------------------------------------------------------------------------------------------
# Reordering scores (lader's evaluation: Kendall's tau, fuzzy reordering score)
# ----------------------------------------------------------------------------------------------------------


def _count_inversions(values: np.ndarray) -> int:
    """Pairs i < j with values[i] > values[j]: O(n^2) in numpy for sentence lengths, Fenwick tree beyond."""
    n = len(values)
    if n <= 512:
        return int(np.count_nonzero(np.triu(values[:, None] > values[None, :], 1)))
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.argsort(values, kind="stable")] = np.arange(n)
    seen = _FenwickTree(n)
    inversions = 0
    for count, r in enumerate(ranks.tolist()):
        inversions += count - seen.prefix_sum(r + 1)
        seen.add(r, 1)
    return inversions


def kendall_tau(perm: Sequence[int], reference: Sequence[int] | None = None, normalized: bool = False) -> float:
    """Kendall's tau between the order `perm` (element i = position of item i) and `reference` (default:
    monotone 0..n-1): (concordant - discordant) / (n choose 2), in [-1, 1]; 1.0 for n < 2.
    `normalized=True` gives (tau + 1) / 2 in [0, 1] (Isozaki et al. 2010, the form lader reports)."""
    perm = np.asarray(perm, dtype=np.int64)
    n = len(perm)
    if reference is not None:
        reference = np.asarray(reference, dtype=np.int64)
        if len(reference) != n:
            raise ValueError(f"length mismatch: {n} vs {len(reference)}")
        perm = perm[np.argsort(reference, kind="stable")]  # perm's positions read in reference order
    if n < 2:
        tau = 1.0
    else:
        tau = 1.0 - 4.0 * _count_inversions(perm) / (n * (n - 1))
    return (tau + 1.0) / 2.0 if normalized else tau


SOURCE_ORDER_MARGIN = 0.005  # a predicted order "beats" the source order when its mean tau is this much higher


def beats_source_order(tau: float, monotone_tau: float, margin: float = SOURCE_ORDER_MARGIN) -> bool:
    """Whether a predicted order's mean Kendall tau against the oracle (`tau`) beats keeping the source order
    (`monotone_tau`, the same measure for the identity order) by at least `margin`: below that, XL PE's predicted
    positions carry little more than the source order itself. The one rule `xlpe-reorder` and the model card use."""
    return bool(tau >= monotone_tau + margin)


def kendall_tau_flat(positions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """`kendall_tau(p)` (against the monotone order) of every sentence of a flat batch (sentence s owns
    `positions[offsets[s]:offsets[s + 1]]`), as float64; 1.0 for sentences of fewer than 2 words. Sentences of
    one length are compared pairwise together (in chunks of bounded memory); beyond 512 words one by one."""
    positions, offsets = np.asarray(positions, dtype=np.int64), np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    inversions = np.zeros(len(lengths), dtype=np.int64)
    for n in np.unique(lengths[lengths >= 2]).tolist():
        sentences = np.flatnonzero(lengths == n)
        if n > 512:
            for s in sentences.tolist():
                inversions[s] = _count_inversions(positions[offsets[s] : offsets[s + 1]])
            continue
        later = np.triu(np.ones((n, n), dtype=bool), 1)
        chunk = max(1, (1 << 22) // (n * n))
        for start in range(0, len(sentences), chunk):
            rows = sentences[start : start + chunk]
            values = positions[offsets[rows][:, None] + np.arange(n)]
            inversions[rows] = np.count_nonzero((values[:, :, None] > values[:, None, :]) & later, axis=(1, 2))
    tau = np.ones(len(lengths), dtype=np.float64)
    many = lengths >= 2
    tau[many] = 1.0 - 4.0 * inversions[many] / (lengths[many] * (lengths[many] - 1))
    return tau


def fuzzy_reordering_score(pred: Sequence[int], ref: Sequence[int]) -> float:
    """Fuzzy reordering score (Talbot et al. 2011): 1 - (C - 1) / (M - 1), with M words and C the fewest
    chunks that are contiguous and in the same order in both reorderings (pred, ref: element i = position
    of word i). 1.0 for identical orders and for M < 2."""
    pred = np.asarray(pred, dtype=np.int64)
    ref = np.asarray(ref, dtype=np.int64)
    if len(pred) != len(ref):
        raise ValueError(f"length mismatch: {len(pred)} vs {len(ref)}")
    m = len(pred)
    if m < 2:
        return 1.0
    pred_order = np.argsort(pred, kind="stable")  # words in predicted order
    continues_chunk = ref[pred_order[1:]] == ref[pred_order[:-1]] + 1
    chunks = m - int(np.count_nonzero(continues_chunk))
    return 1.0 - (chunks - 1) / (m - 1)
