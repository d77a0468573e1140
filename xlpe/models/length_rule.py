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

The numbers and reports (everything but the enforcement) are in length_limits.py, which imports nothing (the ONNX
runtime's search uses the same rule without torch); they are re-exported here. The functions take torch tensors or
numpy arrays alike. This file imports only torch, transformers and that sibling: it travels as Hub custom code.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .length_limits import (  # noqa: F401  (re-exported: the rule's numbers and reports)
    EXTRA_TOKENS,
    RATIO_DENOMINATOR,
    RATIO_NUMERATOR,
    RULE_TEXT,
    align_tokenizer_limit,
    explicit_length,
    generated_lengths,
    length_budgets,
    limit_warning,
    limit_warnings,
    position_limit,
    reached_limit,
    source_lengths,
    with_cap,
)


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
