"""Reorder positions predicted from the source alone by a standalone reorderer (xlpe.models.modeling_reorderer).

The test-time counterpart of the oracle in `reordering.py`: token-level `reorder_positions` for prepared
datasets (`predict_token_positions`), word-level orders for raw text (`predict_word_positions`: what
`xlpe-reorder predict` prints), and the tokenizer fingerprint that ties a reorderer to the ids it was trained on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
import torch

from .reordering import word_positions_from_tokens
from .tokenization import tokenize_with_word_ids

LONG_LINE_POLICIES = ("error", "monotone")


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the vocabulary (piece -> id; both of a tokenizer with separate source and target
    vocabularies) and the special ids: equal iff the ids mean the same."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    fields = [vocab, tokenizer.pad_token_id, tokenizer.eos_token_id]
    target_vocab = getattr(tokenizer, "target_encoder", None) if getattr(tokenizer, "separate_vocabs", False) else None
    if target_vocab is not None:  # an opus-mt-tc MarianTokenizer (its get_tgt_vocab fails in transformers 5.23)
        fields.append(sorted(target_vocab.items(), key=lambda item: item[1]))
    payload = json.dumps(fields, ensure_ascii=False)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]


def check_tokenizer_match(reorderer_config, tokenizer, what: str = "the model's tokenizer") -> None:
    """ValueError when the reorderer was trained on other token ids than `tokenizer`'s."""
    expected = getattr(reorderer_config, "tokenizer_fingerprint", None)
    actual = tokenizer_fingerprint(tokenizer)
    if expected is not None and expected != actual:
        raise ValueError(
            f"the reorderer was trained with another tokenizer (fingerprint {expected}) than {what} "
            f"({actual}): train it with --tokenizer pointing at that tokenizer"
        )


def collate(features: list[dict], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad input_ids (pad id), attention_mask (0) and reorder_positions (own index) to the longest row."""
    length = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(features), length), dtype=torch.long)
    positions = torch.arange(length).repeat(len(features), 1)
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        ids[row, :n] = torch.as_tensor(f["input_ids"], dtype=torch.long)
        mask[row, :n] = 1
        if "reorder_positions" in f:
            positions[row, :n] = torch.as_tensor(f["reorder_positions"], dtype=torch.long)
    batch = {"input_ids": ids, "attention_mask": mask}
    if "reorder_positions" in features[0]:
        batch["reorder_positions"] = positions
    return batch


@torch.no_grad()
def predict_token_positions(reorderer, input_ids: Sequence[Sequence[int]], batch_size: int = 128) -> list[list[int]]:
    """Token-level XL positions for every id sequence (input order kept; batched longest-first)."""
    reorderer.eval()
    device = next(reorderer.parameters()).device
    order = np.argsort([-len(ids) for ids in input_ids], kind="stable")
    result: list[list[int] | None] = [None] * len(input_ids)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = collate([{"input_ids": input_ids[r]} for r in rows], reorderer.config.pad_token_id)
        positions = reorderer.predict_positions(batch["input_ids"].to(device), batch["attention_mask"].to(device))
        positions = positions.cpu()
        for row, r in enumerate(rows.tolist()):
            result[r] = positions[row, : len(input_ids[r])].tolist()
    return result


def predict_word_positions(
    reorderer, tokenizer, lines: Sequence[str], batch_size: int = 128, long_lines: str = "error"
) -> tuple[list[list[int]], list[int]]:
    """Word-level XL positions (element i = index of source word i in the reordered sentence) for raw lines of
    whitespace words. An empty line gives []. A line over the reorderer's limits (`max_words`, or
    `max_source_positions` tokens) raises ValueError naming its 1-based line number, or with
    `long_lines="monotone"` keeps its own order; returns (positions per line, 1-based numbers of such lines)."""
    if long_lines not in LONG_LINE_POLICIES:
        raise ValueError(f"long_lines must be one of {LONG_LINE_POLICIES}, got {long_lines!r}")
    words = [line.split() for line in lines]
    ids, word_ids = tokenize_with_word_ids(tokenizer, [" ".join(w) for w in words])
    config = reorderer.config
    too_long = [
        n
        for n, (w, i) in enumerate(zip(words, ids), start=1)
        if len(w) > config.max_words or len(i) > config.max_source_positions
    ]
    if too_long and long_lines == "error":
        n = too_long[0]
        raise ValueError(
            f"line {n}: {len(words[n - 1])} words / {len(ids[n - 1])} tokens; the reorderer accepts at "
            f"most max_words={config.max_words} words and max_source_positions={config.max_source_positions} tokens "
            f"({len(too_long)} such lines; long_lines='monotone' keeps their order)"
        )
    skip = set(too_long) | {n for n, w in enumerate(words, start=1) if not w}
    todo = [n - 1 for n in range(1, len(lines) + 1) if n not in skip]
    predicted = predict_token_positions(reorderer, [ids[k] for k in todo], batch_size)
    result = [list(range(len(w))) for w in words]
    for k, token_positions in zip(todo, predicted):
        result[k] = word_positions_from_tokens(token_positions, word_ids[k], len(words[k]))
    return result, too_long


def order_from_positions(positions: Sequence[int]) -> list[int]:
    """Positions (element i = slot of word i) -> order (element k = the word placed k-th)."""
    return np.argsort(np.asarray(positions, dtype=np.int64), kind="stable").tolist()


__all__ = [
    "LONG_LINE_POLICIES",
    "check_tokenizer_match",
    "collate",
    "order_from_positions",
    "predict_token_positions",
    "predict_word_positions",
    "tokenizer_fingerprint",
]
