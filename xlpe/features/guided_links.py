"""Word alignments projected to sub-word links, the supervision of guided alignment (`alignment_links`,
xlpe/models/guided_alignment.py): a link between source word i and target word j links every sub-word token of
word i (in `input_ids`) with every sub-word token of word j (in `labels`), the rule of Garg et al. 2019 (Sec. 5.1)
for BPE. Special tokens (EOS, language tags) get no link. Per pair the result is a flat list
[t0, s0, t1, s1, ...] of (target token, source token) indices, sorted and without duplicates.

One numpy pass over a whole batch (flat links, words and tokens as in `xlpe.features.reordering`), no per-token
Python.
"""

from __future__ import annotations

import numpy as np


def _word_tokens(word_ids: np.ndarray, token_offsets: np.ndarray, word_offsets: np.ndarray):
    """For each flat word: (first index into `order`, token count), and `order` (word tokens sorted by word)."""
    token_sentence = np.repeat(np.arange(len(token_offsets) - 1, dtype=np.int64), np.diff(token_offsets))
    words_per_sentence = np.diff(word_offsets)[token_sentence]
    real = (word_ids >= 0) & (word_ids < words_per_sentence)  # special tokens and unknown words: no link
    flat_word = np.where(real, word_offsets[token_sentence] + word_ids, -1)
    order = np.flatnonzero(real)[np.argsort(flat_word[real], kind="stable")]
    sorted_words = flat_word[order]
    everything = np.arange(int(word_offsets[-1]), dtype=np.int64)
    first = np.searchsorted(sorted_words, everything, side="left")
    return first, np.searchsorted(sorted_words, everything, side="right") - first, order


def subword_links_flat(
    link_sentence: np.ndarray,
    link_source: np.ndarray,
    link_target: np.ndarray,
    source_word_offsets: np.ndarray,
    target_word_offsets: np.ndarray,
    source_word_ids: np.ndarray,
    source_token_offsets: np.ndarray,
    target_word_ids: np.ndarray,
    target_token_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets): sentence s's flat [t, s, ...] token links are values[offsets[s]:offsets[s + 1]].

    Links are flat (one entry per word link: sentence, source word, target word, checked by the caller); words
    and tokens of each side are laid out as for `xlpe.features.reordering.project_positions_to_subwords_flat`."""
    as_int = [np.asarray(a, dtype=np.int64) for a in (link_sentence, link_source, link_target)]
    link_sentence, link_source, link_target = as_int
    source_word_offsets, target_word_offsets = (
        np.asarray(a, np.int64) for a in (source_word_offsets, target_word_offsets)
    )
    source_token_offsets, target_token_offsets = (
        np.asarray(a, np.int64) for a in (source_token_offsets, target_token_offsets)
    )
    s_first, s_count, s_order = _word_tokens(
        np.asarray(source_word_ids, np.int64), source_token_offsets, source_word_offsets
    )
    t_first, t_count, t_order = _word_tokens(
        np.asarray(target_word_ids, np.int64), target_token_offsets, target_word_offsets
    )
    source_word = source_word_offsets[link_sentence] + link_source
    target_word = target_word_offsets[link_sentence] + link_target
    per_link_s, per_link_t = s_count[source_word], t_count[target_word]
    sizes = per_link_s * per_link_t
    link = np.repeat(np.arange(len(link_sentence), dtype=np.int64), sizes)
    within = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    source_token = s_order[s_first[source_word[link]] + within // per_link_t[link]]
    target_token = t_order[t_first[target_word[link]] + within % per_link_t[link]]
    sentence = link_sentence[link]
    source_local = source_token - source_token_offsets[sentence]
    target_local = target_token - target_token_offsets[sentence]
    keys = np.unique(np.stack([sentence, target_local, source_local], axis=1), axis=0)  # sorted, no duplicates
    counts = np.bincount(keys[:, 0], minlength=len(source_token_offsets) - 1) * 2
    return keys[:, 1:].reshape(-1), np.r_[0, np.cumsum(counts)].astype(np.int64)


__all__ = ["subword_links_flat"]
