"""The length rule of every decoding path: how many tokens a sentence's translation may have, and what is reported.

* **The budget.** A sentence of n real (non-pad) source tokens, special tokens included, gets at most
  `min(floor(1.5 n) + 10, position_limit - 1)` new tokens, its end-of-sentence token included
  (`length_budgets`). It depends on the sentence alone, never on the padded length of its batch, so a
  translation is the same whatever sentences it is batched with.
* **The limits.** `position_limit` is the model's `max_position_embeddings` (the longest source it can encode,
  and the decoder's position table); a tokenizer whose `model_max_length` differs is set to it
  (`align_tokenizer_limit`), so an input the model can take is never cut or warned about.
* **Enforcement.** `LengthBudgetLogitsProcessor` forces the end-of-sentence token in each row whose generated
  length reached its own budget (greedy and beam search; vectorised over rows, no host synchronisation);
  `length_rule_generate_kwargs` adds it to a `generate` call together with the call's overall cap, the largest
  budget of the batch (`with_cap`: given as `max_length`, so a checkpoint's saved `max_length` raises no warning).
  An explicit `max_new_tokens`/`max_length` is a per-batch cap, as in transformers, and replaces the rule.
* **Reports.** `generated_lengths` (new tokens up to and including the first end-of-sentence token) and
  `reached_limit` (outputs whose length reached their budget or cap: ended by the rule, not by the model) are what
  the pipeline, `xlpe-translate`, `xlpe-export --translate`, `OnnxTranslator.translate` and `xlpe-train`'s
  prediction metrics count; `limit_warning` words the one warning per file or batch.

The functions take torch tensors or numpy arrays alike (the ONNX runtime's search uses the same rule).
This file imports only torch and transformers: it travels as Hub custom code.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList

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


class LengthBudgetLogitsProcessor(LogitsProcessor):
    """Forces `eos_token_id` in every row whose generated length reached its own budget.

    `budgets`: [batch] new tokens allowed per sentence, end-of-sentence token included; beam rows (batch x beams,
    each sentence's beams contiguous, as `generate` expands them) share their sentence's budget. `prompt_length`:
    the decoder prompt (the start token). With n tokens generated, the next one is forced to EOS when n + 1 is the
    budget; rows that already ended are left to the search (which pads them)."""

    def __init__(self, budgets: torch.Tensor, eos_token_id: int, prompt_length: int = 1):
        if eos_token_id is None:
            raise ValueError("eos_token_id: the length rule needs an end-of-sentence token to force")
        self.budgets = torch.as_tensor(budgets).long()
        self.eos_token_id = int(eos_token_id)
        self.prompt_length = int(prompt_length)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.shape[0]
        budgets = self.budgets.to(scores.device).repeat_interleave(rows // self.budgets.shape[0])
        at_budget = (input_ids.shape[1] - self.prompt_length + 1) >= budgets  # [rows]
        forced = torch.full_like(scores[:1], -float("inf"))
        forced[:, self.eos_token_id] = 0
        return torch.where(at_budget[:, None], forced, scores)


def explicit_length(generate_kwargs: dict) -> bool:
    """Whether a `generate` call caps its length itself (`max_new_tokens` or `max_length` given)."""
    return any(generate_kwargs.get(name) is not None for name in ("max_new_tokens", "max_length"))


def length_rule_generate_kwargs(attention_mask: torch.Tensor, limit: int, eos_token_id: int, generate_kwargs: dict):
    """(`generate_kwargs` with the rule added, budgets [batch]) for a batch whose source mask is `attention_mask`.

    Without `max_new_tokens`/`max_length` in `generate_kwargs`: a `LengthBudgetLogitsProcessor` is appended to
    the call's `logits_processor` and `max_new_tokens` is the largest budget of the batch (one host read before
    generation). With one of them: the kwargs unchanged, and every row's budget is that cap."""
    kwargs = dict(generate_kwargs)
    if explicit_length(kwargs):
        rows = attention_mask.shape[0]
        cap = kwargs.get("max_new_tokens")
        if cap is None:
            cap = int(kwargs["max_length"]) - 1
        budgets = torch.full((rows,), int(cap), dtype=torch.long, device=attention_mask.device)
        return with_cap(kwargs, int(cap)), budgets
    budgets = length_budgets(source_lengths(attention_mask).long(), limit)
    processors = LogitsProcessorList(kwargs.get("logits_processor") or [])
    processors.append(LengthBudgetLogitsProcessor(budgets, eos_token_id))
    kwargs["logits_processor"] = processors
    return with_cap(kwargs, int(budgets.max()) if budgets.numel() else 1), budgets


def with_cap(generate_kwargs: dict, new_tokens: int) -> dict:
    """`generate_kwargs` capped at `new_tokens` new tokens, spelt as `max_length` = the decoder start token +
    `new_tokens` with `max_new_tokens=None`: the same cap for an encoder-decoder model, whatever its generation
    config holds. (`max_new_tokens` beside a saved `max_length`, as OPUS-MT checkpoints have it, 512, makes
    transformers warn at every call; a saved `max_new_tokens` would override a `max_length` given alone.)"""
    return {**generate_kwargs, "max_length": new_tokens + 1, "max_new_tokens": None}


def generated_lengths(sequences, eos_token_id: int, pad_token_id, prompt_length: int = 1):
    """New tokens of each row of `sequences` [rows, length] (the decoder prompt first) up to and including its
    first `eos_token_id`; a row without one counts its non-pad tokens (torch or numpy)."""
    new = sequences[:, prompt_length:]
    is_eos = new == eos_token_id
    if isinstance(new, torch.Tensor):
        before_eos = torch.cumsum(is_eos.long(), dim=1) == 0
        return (before_eos & (new != pad_token_id)).sum(-1) + is_eos.any(-1).long()
    before_eos = is_eos.cumsum(axis=1) == 0
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
    "RULE_TEXT",
    "LengthBudgetLogitsProcessor",
    "align_tokenizer_limit",
    "explicit_length",
    "generated_lengths",
    "length_budgets",
    "length_rule_generate_kwargs",
    "with_cap",
    "limit_warning",
    "limit_warnings",
    "position_limit",
    "reached_limit",
    "source_lengths",
]
