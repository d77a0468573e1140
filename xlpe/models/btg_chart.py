"""Exact BTG decoding of pairwise order scores: CKY over straight/inverted nodes (Wu 1997), batched in torch.

The standalone reorderer (modeling_reorderer.py) scores every ordered word pair: `pair_logits[b, a, c]` is the
log-odds that source word a comes before word c in target order (antisymmetric). The score of a permutation is
the sum over word pairs of log sigmoid(+-logit), the sign taken by the order it gives the pair (Tromble & Eisner
2009 "linear ordering"; here restricted, as in the XL PE paper's preorderer, to BTG permutations):

    score(span [i, k) split at m, straight) = best[i, m] + best[m, k] + sum_{a in [i,m), c in [m,k)} log s(l[a, c])
    score(span [i, k) split at m, inverted) = best[i, m] + best[m, k] + sum_{a in [i,m), c in [m,k)} log s(-l[a, c])

Each cross-child sum is O(1) from a 2-D prefix sum, so one sentence of n words costs O(n^3) additions, done as
n tensor steps over all spans of one length and all sentences of the batch; the back-trace is vectorised too
(one step per tree level). The result is the highest-scoring BTG permutation (checked against brute force in
tests/models/test_reorderer.py); ties prefer straight nodes and the leftmost split, so all-zero scores give the
monotone order. Every output is a valid permutation of each sentence's words.

Structured training (`btg_log_partition`) sums over the same space instead of maximising: the inside algorithm
in log space gives log Z = log sum over BTG permutations of exp(score), so that log Z - score(oracle) is the
negative log-likelihood of a CRF over BTG permutations (training_loss="btg_crf"). Straight (and inverted) nodes are
associative, so several trees give one permutation; the inside pass counts each permutation once by keeping the
left-branching normal form (Wu 1997; Zens & Ney 2003): a straight node's right child is never straight, an
inverted node's right child never inverted. Checked against brute-force enumeration in the tests.

Flat file, imports only torch: it travels as Hub custom code with the reorderer.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def _cross_sums(gain: torch.Tensor) -> torch.Tensor:
    """[B, n, n] pair gains (only a < c used) -> [B, n+1, n+1] prefix sums P[x, y] = sum_{a<x, c<y, a<c} gain."""
    upper = torch.triu(gain, diagonal=1)
    return F.pad(upper.cumsum(1).cumsum(2), (1, 0, 1, 0))


def _rect(prefix: torch.Tensor, i: torch.Tensor, m: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Sum of the gains of pairs (a, c), a in [i, m), c in [m, k), for index tensors of one shape."""
    return prefix[:, m, k] - prefix[:, i, k] - prefix[:, m, m] + prefix[:, i, m]


def btg_chart(pair_logits: torch.Tensor, num_words: int):
    """Fill the CKY chart for the first `num_words` words of every row.

    Returns (best, split, inverted): best[b, i, k] the best score of span [i, k); split / inverted the best
    node's split point and direction. Spans beyond a row's own length are filled but never read.
    """
    batch, device = pair_logits.shape[0], pair_logits.device
    n = num_words
    logits = pair_logits[:, :n, :n].float()
    keep, swap = _cross_sums(F.logsigmoid(logits)), _cross_sums(F.logsigmoid(-logits))
    best = torch.zeros(batch, n + 1, n + 1, device=device)
    split = torch.zeros(batch, n + 1, n + 1, dtype=torch.long, device=device)
    inverted = torch.zeros(batch, n + 1, n + 1, dtype=torch.bool, device=device)
    for length in range(2, n + 1):
        i = torch.arange(n - length + 1, device=device)[:, None]  # span starts, [spans, 1]
        m = i + torch.arange(1, length, device=device)[None, :]  # split points, [spans, length - 1]
        k = i + length
        i, k = i.expand_as(m), k.expand_as(m)
        children = best[:, i, m] + best[:, m, k]
        candidates = torch.cat([children + _rect(keep, i, m, k), children + _rect(swap, i, m, k)], dim=2)
        score, choice = candidates.max(dim=2)  # first maximum: straight before inverted, leftmost split first
        starts, ends = i[:, 0], k[:, 0]
        best[:, starts, ends] = score
        split[:, starts, ends] = starts[None, :] + 1 + choice % (length - 1)
        inverted[:, starts, ends] = choice >= length - 1
    return best, split, inverted


def btg_log_partition(
    pair_logits: torch.Tensor, word_counts: torch.Tensor, rows_per_chunk: int | None = None
) -> torch.Tensor:
    """[B] log of the sum over the BTG permutations of every row's words of exp(score) (differentiable).

    Inside algorithm over normal-form trees: S[i, k] / I[i, k] sum the trees of span [i, k) rooted in a straight /
    inverted node, A = logaddexp(S, I) (0 for one word), and

        S[i, k] = logsumexp_m A[i, m] + (0 if k - m == 1 else I[m, k]) + keep(i, m, k)
        I[i, k] = logsumexp_m A[i, m] + (0 if k - m == 1 else S[m, k]) + swap(i, m, k)

    with keep/swap the cross-child sums of btg_chart. Rows of 0 or 1 word have log Z = 0. Memory (kept for the
    backward pass) grows as rows x n^3 for the longest row n: `rows_per_chunk` runs the rows in chunks of similar
    length (sorted by word count, one host sync), so that one long sentence does not size the whole batch's chart.
    """
    if rows_per_chunk is not None and pair_logits.shape[0] > rows_per_chunk:
        order = torch.argsort(word_counts)
        counts = word_counts[order].tolist()
        parts = []
        for start in range(0, len(counts), rows_per_chunk):
            rows = order[start : start + rows_per_chunk]
            width = max(counts[start : start + rows_per_chunk])
            parts.append(btg_log_partition(pair_logits[rows][:, :width, :width], word_counts[rows]))
        return torch.cat(parts)[torch.argsort(order)]  # back to the rows' own order
    batch, device = pair_logits.shape[0], pair_logits.device
    n = int(word_counts.max()) if batch else 0
    if n < 2:
        return pair_logits.new_zeros(batch, dtype=torch.float)
    logits = pair_logits[:, :n, :n].float()
    keep, swap = _cross_sums(F.logsigmoid(logits)), _cross_sums(F.logsigmoid(-logits))
    # charts indexed [B, start, end]; a one-word span is a leaf: A = 0 and it may be either child of any node
    any_node = torch.zeros(batch, n + 1, n + 1, device=device)
    not_straight = torch.zeros(batch, n + 1, n + 1, device=device)  # right child allowed under a straight node
    not_inverted = torch.zeros(batch, n + 1, n + 1, device=device)  # right child allowed under an inverted node
    for length in range(2, n + 1):
        i = torch.arange(n - length + 1, device=device)[:, None]
        m = i + torch.arange(1, length, device=device)[None, :]
        k = i + length
        i, k = i.expand_as(m), k.expand_as(m)
        left = any_node[:, i, m]
        straight = torch.logsumexp(left + not_straight[:, m, k] + _rect(keep, i, m, k), dim=2)
        inverted = torch.logsumexp(left + not_inverted[:, m, k] + _rect(swap, i, m, k), dim=2)
        starts, ends = i[:, 0], k[:, 0]
        any_node = _put(any_node, starts, ends, torch.logaddexp(straight, inverted))
        not_straight = _put(not_straight, starts, ends, inverted)
        not_inverted = _put(not_inverted, starts, ends, straight)
    rows = torch.arange(batch, device=device)
    counts = word_counts.to(device).long()
    total = any_node[rows, torch.zeros_like(counts), counts.clamp(min=0)]
    return torch.where(counts >= 2, total, torch.zeros_like(total))


def _put(chart: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """chart with chart[:, starts, ends] = values, out of place (the old chart stays valid for autograd)."""
    chart = chart.clone()
    chart[:, starts, ends] = values
    return chart


def btg_decode(pair_logits: torch.Tensor, word_counts: torch.Tensor) -> torch.Tensor:
    """Highest-scoring BTG permutation of every row's words.

    Args:
        pair_logits: [B, W, W] log-odds that word a precedes word c in target order (entries at or beyond a
            row's word count are ignored).
        word_counts: [B] number of words of each row (0 allowed).
    Returns:
        [B, W] long: the XL position (index in the reordered sentence) of each word; slots at or beyond a row's
        word count keep their own index.
    """
    batch, width = pair_logits.shape[:2]
    device = pair_logits.device
    positions = torch.arange(width, device=device).repeat(batch, 1)
    n = int(word_counts.max()) if batch else 0
    if n < 2:
        return positions
    _, split, inverted = btg_chart(pair_logits, n)
    # back-trace, one tree level per step: frontier spans (row, start, end, first output slot)
    rows = torch.nonzero(word_counts > 0).squeeze(1)
    start = torch.zeros_like(rows)
    end = word_counts[rows].long()
    offset = torch.zeros_like(rows)
    while rows.numel():
        leaf = end - start == 1
        positions[rows[leaf], start[leaf]] = offset[leaf]
        rows, start, end, offset = rows[~leaf], start[~leaf], end[~leaf], offset[~leaf]
        middle, inv = split[rows, start, end], inverted[rows, start, end]
        left_offset = torch.where(inv, offset + (end - middle), offset)
        right_offset = torch.where(inv, offset, offset + (middle - start))
        rows, start, end, offset = (
            torch.cat([rows, rows]),
            torch.cat([start, middle]),
            torch.cat([middle, end]),
            torch.cat([left_offset, right_offset]),
        )
    return positions


def order_scores(pair_logits: torch.Tensor, before: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """[B] score of given orders, batched: sum over the valid pairs a < c (`pairs` [B, W, W] bool, upper
    triangle) of log sigmoid of l[a, c] signed by `before[b, a, c]` (a placed before c)."""
    logits = pair_logits.float()
    gains = torch.where(before, F.logsigmoid(logits), F.logsigmoid(-logits))
    return (gains * pairs).sum(dim=(1, 2))


def permutation_score(pair_logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Score of one order of n words ([n, n] logits, [n] positions): sum over pairs a < c of log sigmoid of the
    logit signed by the order the positions give the pair. The quantity `btg_decode` maximises."""
    n = positions.shape[0]
    logits = pair_logits[:n, :n].float()
    kept = positions[:, None] < positions[None, :]
    gains = torch.where(kept, F.logsigmoid(logits), F.logsigmoid(-logits))
    return torch.triu(gains, diagonal=1).sum()


__all__ = ["btg_chart", "btg_decode", "btg_log_partition", "order_scores", "permutation_score"]
