"""The length rule's numbers and reports, without torch: each sentence's budget of new tokens, the limits, and
the warnings (the rule itself: xlpe/models/length_rule.py, which re-exports every name here and adds its
enforcement in `generate`, `LengthBudgetLogitsProcessor`).

The functions take torch tensors or numpy arrays alike; this file imports nothing, so the ONNX runtime's search
(`xlpe.export.runtime`) uses the same rule where torch is not installed. It travels as Hub custom code beside
length_rule.py.
"""

from __future__ import annotations

RATIO_NUMERATOR, RATIO_DENOMINATOR, EXTRA_TOKENS = 3, 2, 10  # floor(1.5 n) + 10
RULE_TEXT = "1.5 x source tokens + 10, at most max_position_embeddings - 1"


def position_limit(config, tokenizer=None) -> int:
    """The model's position limit: `config.max_position_embeddings`, or the tokenizer's `model_max_length` for a
    model without a position table; ValueError when neither is known."""
    limit = getattr(config, "max_position_embeddings", None)
    if not limit and tokenizer is not None:
        limit = getattr(tokenizer, "model_max_length", None)
    if not limit or int(limit) < 2:
        raise ValueError(f"max_position_embeddings must be >= 2 to bound generation, got {limit}")
    return int(limit)


def align_tokenizer_limit(tokenizer, limit: int):
    """Set `tokenizer.model_max_length` to the model's position `limit` (returns the tokenizer)."""
    if getattr(tokenizer, "model_max_length", None) != limit:
        tokenizer.model_max_length = int(limit)
    return tokenizer


def length_budgets(source_lengths, limit: int):
    """Each sentence's budget of new tokens, `min(floor(1.5 n) + 10, limit - 1)`, for source lengths `n` (a torch
    tensor or numpy array of real token counts, or an int)."""
    if limit < 2:
        raise ValueError(f"limit must be >= 2, got {limit}")
    budgets = source_lengths * RATIO_NUMERATOR // RATIO_DENOMINATOR + EXTRA_TOKENS
    if isinstance(budgets, int):
        return min(budgets, limit - 1)
    return budgets.clip(max=limit - 1)


def source_lengths(attention_mask):
    """Real (non-pad) tokens of each row of a source `attention_mask` (torch or numpy)."""
    return attention_mask.sum(-1)


def explicit_length(generate_kwargs: dict) -> bool:
    """Whether a `generate` call caps its length itself (`max_new_tokens` or `max_length` given)."""
    return any(generate_kwargs.get(name) is not None for name in ("max_new_tokens", "max_length"))


def with_cap(generate_kwargs: dict, new_tokens: int) -> dict:
    """`generate_kwargs` capped at `new_tokens` new tokens, spelt as `max_length` = the decoder start token +
    `new_tokens` with `max_new_tokens=None`: the same cap for an encoder-decoder model, whatever its generation
    config holds. (`max_new_tokens` beside a saved `max_length`, as OPUS-MT checkpoints have it, 512, makes
    transformers warn at every call; a saved `max_new_tokens` would override a `max_length` given alone.)"""
    return {**generate_kwargs, "max_length": new_tokens + 1, "max_new_tokens": None}


def generated_lengths(sequences, eos_token_id: int, pad_token_id, prompt_length: int = 1):
    """New tokens of each row of `sequences` [rows, length] (the decoder prompt first) up to and including its
    first `eos_token_id`; a row without one counts its non-pad tokens (torch or numpy: the methods both have)."""
    new = sequences[:, prompt_length:]
    is_eos = new == eos_token_id
    before_eos = is_eos.cumsum(1) == 0
    return (before_eos & (new != pad_token_id)).sum(-1) + is_eos.any(-1)


def reached_limit(lengths, budgets):
    """Rows whose output length reached their budget or cap: the rule ended them, not the model."""
    return lengths >= budgets


def limit_warning(what: str, numbers: list[int], total: int, detail: str, unit: str = "line", shown: int = 20) -> str:
    """One warning text: `<count> of <total> <what> (<detail>): <unit> 1, 5, ...` with the first `shown` numbers."""
    listed = ", ".join(map(str, numbers[:shown])) + (
        f", ... ({len(numbers) - shown} more)" if len(numbers) > shown else ""
    )
    return f"{len(numbers)} of {total} {what} ({detail}): {unit} {listed}"


def limit_warnings(
    limit: int, too_long: list[int], at_limit: list[int], total: int, unit: str = "line", cap: str = "--max_new_tokens"
) -> list[str]:
    """The warnings of one translated file or batch: inputs longer than the model's position `limit` (cut to it),
    and translations that reached their length budget or the explicit `cap` instead of ending on their own; each
    counts its `unit`s (1-based numbers in `too_long`, `at_limit`) and names the first."""
    warnings = []
    if too_long:
        detail = f"{limit} tokens, max_position_embeddings; translated from their first {limit} tokens"
        warnings.append(limit_warning(f"{unit}s are longer than the model's limit", too_long, total, detail, unit))
    if at_limit:
        what = "translations reached their length limit before ending and may be cut short"
        warnings.append(limit_warning(what, at_limit, total, f"{RULE_TEXT}, or {cap}", unit))
    return warnings


__all__ = [
    "RATIO_NUMERATOR",
    "RATIO_DENOMINATOR",
    "EXTRA_TOKENS",
    "RULE_TEXT",
    "align_tokenizer_limit",
    "explicit_length",
    "generated_lengths",
    "length_budgets",
    "limit_warning",
    "limit_warnings",
    "position_limit",
    "reached_limit",
    "source_lengths",
    "with_cap",
]
