"""Greedy and beam search in numpy over any next-token function, reproducing transformers' `generate` (5.x) for the
options a translation model's generation config uses, so that an exported model translates token for token as
PyTorch does:

* `max_length` / `max_new_tokens` (the decoder prompt is the start token), `min_length`, `min_new_tokens`;
* `bad_words_ids` of single tokens (Marian bans its pad; EOS is never banned, as in `NoBadWordsLogitsProcessor`);
* `forced_bos_token_id` (step 1) and `forced_eos_token_id` (the last step);
* `renormalize_logits` (OPUS-MT's generation config sets it): the processed scores log-softmaxed again, last (in
  beam search in place of the first log_softmax: `SearchSettings.beam_log_probs`);
* the length rule's per-sentence budgets (`LengthBudgetLogitsProcessor` of xlpe/models/length_rule.py): the
  end-of-sentence token forced in each row whose generated length reached its own budget;
* beam search with `num_beams`, `length_penalty`, `early_stopping` (True, False or "never"): the vectorised
  search of `GenerationMixin._beam_search` (2 x num_beams candidates per step, finished hypotheses kept in a
  second bank, the early-stop heuristic), step for step; a stable top-k (ties by the lower index).

Anything else (sampling, repetition penalties, n-gram blocking, several returned sequences, multi-token bad
words) is refused by name (`SearchSettings.from_generation_config`): silently ignoring it would translate
differently from PyTorch.

`next_logits(sequences, reorder)` is the model: given the running hypotheses [rows, length] (the last column is the
new token; rows = batch x beams) and, after the first step, the row each hypothesis came from (to reorder a
cache), it returns the next-token logits [rows, vocab] as float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

NEG = -1.0e9  # transformers' "impossible" score in beam search

UNSUPPORTED = {  # generation-config field -> the value under which it does nothing
    "do_sample": False,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "num_return_sequences": 1,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None,
    "constraints": None,
    "force_words_ids": None,
    "guidance_scale": None,
    "remove_invalid_values": False,
}


ACCEPTED = {
    "decoder_start_token_id",
    "eos_token_id",
    "pad_token_id",
    "max_length",
    "max_new_tokens",
    "num_beams",
    "min_length",
    "min_new_tokens",
    "length_penalty",
    "early_stopping",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "renormalize_logits",
    "use_cache",
}


@dataclass
class SearchSettings:
    """The decoding options of one `generate` call (module docstring)."""

    decoder_start_token_id: int
    eos_token_ids: list[int]
    pad_token_id: int | None
    max_length: int = 20
    num_beams: int = 1
    min_length: int = 0
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    bad_token_ids: list[int] = field(default_factory=list)
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None
    renormalize_logits: bool = False

    @classmethod
    def from_generation_config(cls, config: dict, **overrides) -> SearchSettings:
        """Settings from a generation config (dict) and a call's arguments (`num_beams`, `max_new_tokens`,
        `max_length`, ...); ValueError naming any option this search does not reproduce."""
        merged = {k: v for k, v in {**config, **overrides}.items() if v is not None}  # None: generate's default
        for name, neutral in UNSUPPORTED.items():
            value = merged.get(name, neutral)
            if value is not None and value != neutral and not (neutral is None and value in ([], {})):
                raise ValueError(
                    f"{name}={value!r}: the exported model's search supports greedy and beam search only "
                    f"(expected {name}={neutral!r})"
                )
        unknown = set(overrides) - ACCEPTED - set(UNSUPPORTED)
        if unknown:
            raise ValueError(f"unknown generation arguments: {sorted(unknown)}")
        eos = merged.get("eos_token_id")
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        bad = []
        for sequence in merged.get("bad_words_ids") or []:
            if len(sequence) != 1:
                raise ValueError(
                    f"bad_words_ids={merged['bad_words_ids']!r}: only single-token bad words are supported "
                    "by the exported model's search"
                )
            if sequence[0] not in eos:  # as NoBadWordsLogitsProcessor: EOS is never banned
                bad.append(int(sequence[0]))
        max_length = merged.get("max_length", 20)
        if merged.get("max_new_tokens") is not None:
            max_length = 1 + int(merged["max_new_tokens"])  # the decoder prompt is the start token
        settings = cls(
            decoder_start_token_id=int(merged["decoder_start_token_id"]),
            eos_token_ids=[int(i) for i in eos],
            pad_token_id=merged.get("pad_token_id"),
            max_length=int(max_length),
            num_beams=int(merged.get("num_beams") or 1),
            min_length=int(merged.get("min_length") or 0),
            min_new_tokens=int(merged.get("min_new_tokens") or 0),
            length_penalty=float(merged.get("length_penalty", 1.0)),
            early_stopping=merged.get("early_stopping", False),
            bad_token_ids=bad,
            forced_bos_token_id=merged.get("forced_bos_token_id"),
            forced_eos_token_id=merged.get("forced_eos_token_id"),
            renormalize_logits=bool(merged.get("renormalize_logits", False)),
        )
        for name in ("max_length", "num_beams"):
            if getattr(settings, name) < 1 + (name == "max_length"):
                raise ValueError(f"{name} must be >= {1 + (name == 'max_length')}, got {getattr(settings, name)}")
        return settings

    def process(
        self,
        scores: np.ndarray,
        cur_len: int,
        budgets: np.ndarray | None = None,
        overwrite: bool = False,
        normalize: Callable | None = None,
    ) -> np.ndarray:
        """The logits processors of `generate`, in its order, on scores [rows, vocab] at length `cur_len`;
        `budgets` [rows]: each row's length budget (`LengthBudgetLogitsProcessor` of xlpe/models/length_rule.py,
        applied last as `generate` applies a call's own processors). `overwrite=True`: in `scores`' own buffer.
        `normalize`: the log_softmax `renormalize_logits` applies (module docstring; default `log_softmax`)."""
        if not overwrite:
            scores = scores.copy()
        if self.bad_token_ids:
            scores[:, self.bad_token_ids] = -np.inf
        if self.eos_token_ids and (cur_len < self.min_length or cur_len - 1 < self.min_new_tokens):
            scores[:, self.eos_token_ids] = -np.inf
        if self.forced_bos_token_id is not None and cur_len == 1:
            scores[:] = -np.inf
            scores[:, self.forced_bos_token_id] = 0
        if self.forced_eos_token_id is not None and cur_len == self.max_length - 1:
            scores[:] = -np.inf
            scores[:, self.forced_eos_token_id] = 0
        if budgets is not None:
            at_budget = cur_len >= budgets  # the decoder prompt is the start token: cur_len - 1 generated
            scores[at_budget] = -np.inf
            scores[at_budget, self.eos_token_ids[0]] = 0
        if self.renormalize_logits:  # `LogitNormalization`: after every other processor, a call's own included
            scores = (normalize or _log_softmax_in_place)(scores)
        return scores

    def beam_log_probs(
        self, logits: np.ndarray, cur_len: int, budgets: np.ndarray | None = None, normalize: Callable | None = None
    ) -> np.ndarray:
        """A beam search step's scores in `logits`' own buffer, as `_beam_search` computes them: log_softmax, then
        `process`. Every processor above only sets scores to -inf or replaces a whole row, and log_softmax is
        unchanged by adding a constant to a row, so with `renormalize_logits` (which ends `process` with its own
        log_softmax) the first log_softmax is skipped: the same values up to rounding, one pass over
        [rows, vocab] instead of two. A processor that is not of that kind must not be added without this."""
        if not self.renormalize_logits:
            logits = (normalize or _log_softmax_in_place)(logits)
        return self.process(logits, cur_len, budgets, overwrite=True, normalize=normalize)

    def ends(self, tokens: np.ndarray) -> np.ndarray:
        return np.isin(tokens, self.eos_token_ids) if self.eos_token_ids else np.zeros(tokens.shape, dtype=bool)


def log_softmax(logits: np.ndarray, overwrite: bool = False) -> np.ndarray:
    """log_softmax over the last axis (float32 in, float32 out); `overwrite=True` computes it in `logits`' own
    buffer (the same values, no [rows, vocab] temporaries: a step's logits are read once)."""
    shifted = logits if overwrite else logits.copy()
    shifted -= shifted.max(axis=-1, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return shifted


def _log_softmax_in_place(scores: np.ndarray) -> np.ndarray:
    return log_softmax(scores, overwrite=True)


# top_k over a long row (a beam search step: beams x vocabulary scores a sentence) first finds the chunks of
# TOP_K_CHUNK values whose maxima are among the k largest: the k largest values are all >= the k-th largest chunk
# maximum (those k maxima are k values at least that large), so only chunks reaching it hold candidates. That reads
# each value once (a chunked max) instead of partitioning the whole row: 1.5 ms against 15 ms for 16 rows of 61k
# values, one thread. Rows where more than TOP_K_MAX_CHUNKS chunks tie at the threshold (rows of -inf after a
# forced token) are sorted whole.
TOP_K_CHUNK = 64
TOP_K_MAX_CHUNKS = 64
TOP_K_SHORT_ROW = 4096  # rows up to this long are sorted directly


def _top_k_sorted(values: np.ndarray, k: int) -> np.ndarray:
    """`top_k` by a stable sort of whole rows (descending value, then ascending index): exact, ties included."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values of each row, largest first, ties by the lower index (as a stable sort)."""
    rows, width = values.shape
    if k >= width or width <= TOP_K_SHORT_ROW or k > TOP_K_MAX_CHUNKS:
        return _top_k_sorted(values, k)
    starts = np.arange(0, width, TOP_K_CHUNK)
    if len(starts) <= k:  # every chunk would hold a candidate
        return _top_k_sorted(values, k)
    chunk_max = np.maximum.reduceat(values, starts, axis=1)  # [rows, chunks]
    threshold = np.partition(chunk_max, len(starts) - k, axis=1)[:, len(starts) - k : len(starts) - k + 1]
    holds = chunk_max >= threshold
    counts = holds.sum(axis=1)
    result = np.empty((rows, k), dtype=np.int64)
    slow = ~np.isfinite(threshold[:, 0]) | (counts > TOP_K_MAX_CHUNKS)
    if slow.any():
        result[slow] = _top_k_sorted(values[slow], k)
    fast = np.flatnonzero(~slow)
    if len(fast):
        # each row's chunks that hold candidates, in ascending order, then (to fill a rectangle) chunks that do
        # not: their values are < the threshold <= every chosen value, so they are never chosen
        chunks = np.argsort(~holds[fast], axis=1, kind="stable")[:, : int(counts[fast].max())]
        columns = (chunks[:, :, None] * TOP_K_CHUNK + np.arange(TOP_K_CHUNK)).reshape(len(fast), -1)
        outside = columns >= width
        candidates = values[fast[:, None], np.minimum(columns, width - 1)]
        candidates[outside] = -np.inf
        # the candidates keep their columns' order among the chunks that hold them: ties by the lower index
        result[fast] = np.take_along_axis(columns, _top_k_sorted(candidates, k), axis=1)
    return result


def greedy_search(
    next_logits: Callable,
    batch: int,
    settings: SearchSettings,
    budgets: np.ndarray | None = None,
    normalize: Callable | None = None,
) -> np.ndarray:
    """[batch, length] token ids, the start token first, finished rows padded (as `generate` with num_beams=1);
    `budgets` [batch]: each sentence's length budget (the length rule), or None; `normalize`: as `search`."""
    sequences = np.full((batch, 1), settings.decoder_start_token_id, dtype=np.int64)
    unfinished = np.ones(batch, dtype=bool)
    reorder = None
    while True:
        cur_len = sequences.shape[1]
        logits = np.array(next_logits(sequences, reorder), dtype=np.float32)  # a copy: the search writes in it
        scores = settings.process(logits, cur_len, budgets, overwrite=True, normalize=normalize)
        tokens = scores.argmax(axis=-1)
        if settings.eos_token_ids:
            tokens = np.where(unfinished, tokens, settings.pad_token_id)
        sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
        unfinished &= ~settings.ends(tokens)
        reorder = np.arange(batch)
        if not unfinished.any() or sequences.shape[1] >= settings.max_length:
            return sequences


def beam_search(
    next_logits: Callable,
    batch: int,
    settings: SearchSettings,
    budgets: np.ndarray | None = None,
    normalize: Callable | None = None,
) -> np.ndarray:
    """[batch, length] the best hypothesis of each row (`GenerationMixin._beam_search`, step for step); `budgets`
    [batch]: each sentence's length budget (shared by its beams), or None; `normalize`: as `search`."""
    beams, max_length, penalty, early = (
        settings.num_beams,
        settings.max_length,
        settings.length_penalty,
        settings.early_stopping,
    )
    keep = max(2, 1 + len(settings.eos_token_ids)) * beams
    fill = settings.pad_token_id or (settings.eos_token_ids[0] if settings.eos_token_ids else -1)
    running = np.full((batch, beams, max_length), fill, dtype=np.int64)
    running[:, :, 0] = settings.decoder_start_token_id
    finished_sequences = running.copy()
    running_scores = np.zeros((batch, beams), dtype=np.float32)
    running_scores[:, 1:] = NEG
    finished_scores = np.full((batch, beams), NEG, dtype=np.float32)
    finished = np.zeros((batch, beams), dtype=bool)
    lengths = np.zeros((batch, beams), dtype=np.int64)  # generated tokens of each finished hypothesis
    improvable = np.ones((batch, 1), dtype=bool)
    rows = np.arange(batch)[:, None]
    row_budgets = None if budgets is None else np.repeat(np.asarray(budgets), beams)
    cur_len, reorder = 1, None
    while True:
        flat = running[:, :, :cur_len].reshape(batch * beams, cur_len)
        logits = np.array(next_logits(flat, reorder), dtype=np.float32)  # a copy: the search writes in it
        log_probs = settings.beam_log_probs(logits, cur_len, row_budgets, normalize)
        vocab = log_probs.shape[-1]
        totals = log_probs.reshape(batch, beams, vocab)
        totals += running_scores[:, :, None]
        totals = totals.reshape(batch, beams * vocab)
        chosen = top_k(totals, keep)
        topk_scores = np.take_along_axis(totals, chosen, axis=1)
        source_beam, token = chosen // vocab, chosen % vocab
        candidates = running[rows, source_beam].copy()  # [batch, keep, max_length]
        candidates[:, :, cur_len] = token
        hits = settings.ends(token) | (cur_len + 1 >= max_length)
        # the running beams of the next step: the best candidates that did not stop
        live_scores = topk_scores + hits.astype(np.float32) * NEG
        next_beams = top_k(live_scores, beams)
        running = np.take_along_axis(candidates, next_beams[:, :, None], axis=1)
        running_scores = np.take_along_axis(live_scores, next_beams, axis=1)
        came_from = np.take_along_axis(source_beam, next_beams, axis=1)
        # the finished bank: candidates among the top `beams` that stopped, scored with the length penalty
        just_finished = hits & (np.arange(keep) < beams)[None, :]
        scored = topk_scores / np.float32((cur_len + 1 - 1) ** penalty)
        full = np.all(finished, axis=-1, keepdims=True) & (early is True)
        scored = scored + full.astype(np.float32) * NEG + (~improvable).astype(np.float32) * NEG
        scored = scored + (~just_finished).astype(np.float32) * NEG
        merged_scores = np.concatenate([finished_scores, scored], axis=1)
        best = top_k(merged_scores, beams)
        finished_sequences = np.take_along_axis(
            np.concatenate([finished_sequences, candidates], axis=1), best[:, :, None], axis=1
        )
        finished_scores = np.take_along_axis(merged_scores, best, axis=1)
        lengths = np.take_along_axis(np.concatenate([lengths, np.full((batch, keep), cur_len)], axis=1), best, axis=1)
        finished = np.take_along_axis(np.concatenate([finished, just_finished], axis=1), best, axis=1)
        reorder = (came_from + rows * beams).reshape(-1)
        cur_len += 1
        # the early-stop heuristic (`_check_early_stop_heuristic`)
        hypothetical = max_length - 1 if early == "never" and penalty > 0.0 else cur_len - 1
        best_running = running_scores[:, :1] / np.float32(hypothetical**penalty)
        worst_finished = np.where(finished, finished_scores.min(axis=1, keepdims=True), NEG)
        improvable = improvable & np.any(best_running > worst_finished, axis=-1, keepdims=True)
        open_beams = not (np.all(finished) and early is True)
        if not (improvable.any() and open_beams and not np.all(hits)):
            break
    length = 1 + int(lengths[:, 0].max())
    return finished_sequences[:, 0, :length]


def search(
    next_logits: Callable,
    batch: int,
    settings: SearchSettings,
    budgets: np.ndarray | None = None,
    normalize: Callable | None = None,
) -> np.ndarray:
    """Greedy search for `num_beams=1`, beam search otherwise; `budgets` [batch]: each sentence's length budget
    (xlpe/models/length_rule.py), the end-of-sentence token forced when a row's generated length reaches it.
    `normalize(scores)`: log_softmax over the last axis of float32 [rows, vocab] (it may write in `scores`); default
    numpy's `log_softmax`; the export runtime passes onnxruntime's (runtime.py: 3-4x faster on a step's scores)."""
    if budgets is not None and not settings.eos_token_ids:
        raise ValueError("budgets: per-sentence length budgets need an eos_token_id to force")
    decode = greedy_search if settings.num_beams == 1 else beam_search
    return decode(next_logits, batch, settings, budgets, normalize)


__all__ = ["SearchSettings", "beam_search", "greedy_search", "search"]
