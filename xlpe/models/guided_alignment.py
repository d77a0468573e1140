"""Guided alignment (Garg et al., EMNLP 2019, "Jointly Learning to Align and Translate with Transformer Models",
Sec. 4; Marian's `--guided-alignment`): one decoder layer's cross-attention, one head or the average of its heads,
is supervised with the word alignments of the training pair.

With p_ts the supervised attention probability of target position t on source token s, and gold links
(t, s) in sub-word tokens (`alignment_links`), A_ts = 1 for a link and 0 otherwise, n_t = sum_s A_ts the links of
target position t, and T* = {t : n_t > 0, labels_t != -100} the supervised target positions:

* the alignment distribution   Ā_ts = A_ts / n_t       (each supervised target position's links sum to 1)
* cost "ce" (Garg Eq. in Sec. 4)   L_a = -(1/|T*|) sum_{t in T*} sum_s Ā_ts log p_ts
* cost "mse"                       L_a =  (1/|T*|) sum_{t in T*} sum_s (p_ts - Ā_ts)^2
* total loss                       L = L_translation + guided_alignment_weight * L_a

Target positions without a link are skipped. Marian divides its summed cost by the number of links, which is |T*|
when the alignment rows are normalised as here. A batch without a supervised position gives 0 (with a graph).

The probabilities are computed here for the one supervised layer (q k^T / sqrt(d_h), the source padding masked,
softmax, before dropout) from the cross-attention's own projections, captured by a forward pre-hook during the
decoder's forward, so the attention implementation in use (SDPA, flash) is left as it is and a model with
`guided_alignment_weight = 0` registers no hook and computes nothing extra.

Flat file, imports only torch: it travels as Hub custom code with the modeling files.
"""

from __future__ import annotations

import torch
from torch import nn

IGNORE_INDEX = -100


def cross_attention_probabilities(attention: nn.Module, hidden_states, encoder_states, source_mask, head):
    """Softmax(q k^T * scaling) of a `MarianAttention` used as cross-attention, in float32: [batch, tgt, src]
    for head `head`, or the mean over heads when `head` is None. `source_mask`: [batch, src], 1 = real token."""
    batch, target_length = hidden_states.shape[:2]
    heads, head_dim = attention.num_heads, attention.head_dim
    query = attention.q_proj(hidden_states).view(batch, target_length, heads, head_dim).transpose(1, 2)
    key = attention.k_proj(encoder_states).view(batch, encoder_states.shape[1], heads, head_dim).transpose(1, 2)
    if head is not None:
        query, key = query[:, head : head + 1], key[:, head : head + 1]
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * attention.scaling
    if source_mask is not None:
        scores = scores.masked_fill(~source_mask.bool()[:, None, None, :], torch.finfo(scores.dtype).min)
    return scores.softmax(-1).mean(1)


def alignment_matrix(links: torch.Tensor, target_length: int, source_length: int, check: bool = True) -> torch.Tensor:
    """A: [batch, tgt, src] float32, 1 at each link. `links`: [batch, 2 * n], flat (t0, s0, t1, s1, ...) sub-word
    indices, -100 = padding; with `check` (one host sync) a link outside the lengths is an error (ValueError)."""
    pairs = links.long().view(links.shape[0], -1, 2)
    real = (pairs != IGNORE_INDEX).all(-1)
    target, source = pairs[..., 0], pairs[..., 1]
    bad = real & ((target < 0) | (target >= target_length) | (source < 0) | (source >= source_length))
    if check and bad.any():
        raise ValueError(
            f"alignment_links: links must lie in [0, {target_length}) x [0, {source_length}) (target, source), "
            f"got {pairs[bad][:3].tolist()}"
        )
    # one scatter over flat (target, source) cells, padding sent to a spare cell that is cut off: no data-dependent
    # shapes (compile-friendly, no host sync)
    cells = target_length * source_length
    flat = torch.where(real, target * source_length + source, torch.full_like(target, cells))
    matrix = torch.zeros(links.shape[0], cells + 1, device=links.device).scatter_(1, flat, 1.0)
    return matrix[:, :cells].view(links.shape[0], target_length, source_length)


def guided_alignment_cost(probabilities, links, labels, cost: str = "ce", check: bool = True) -> torch.Tensor:
    """L_a of the module doc: `probabilities` [batch, tgt, src], `links` as `alignment_matrix`'s (`check` too),
    `labels` [batch, tgt] (-100 positions are skipped) or None."""
    gold = alignment_matrix(links, probabilities.shape[1], probabilities.shape[2], check)
    counts = gold.sum(-1)
    supervised = counts > 0
    if labels is not None:
        supervised = supervised & (labels.to(gold.device) != IGNORE_INDEX)
    target = gold / counts.clamp_min(1)[..., None]
    if cost == "ce":
        per_position = -(target * probabilities.clamp_min(1e-9).log()).sum(-1)
    elif cost == "mse":
        per_position = (probabilities - target).pow(2).sum(-1)
    else:
        raise ValueError(f"guided_alignment_cost must be 'ce' or 'mse', got {cost!r}")
    return (per_position * supervised).sum() / supervised.sum().clamp_min(1)


class CrossAttentionCapture:
    """Context manager: while active, records the inputs (decoder states, encoder states) of the cross-attention
    of decoder layer `layer` (negative = from the last)."""

    def __init__(self, decoder: nn.Module, layer: int):
        self.attention = decoder.layers[layer].encoder_attn
        self.hidden_states = self.encoder_states = None

    def _record(self, module, args, kwargs):
        self.hidden_states = args[0] if args else kwargs["hidden_states"]
        self.encoder_states = kwargs.get("key_value_states", args[1] if len(args) > 1 else None)

    def __enter__(self):
        self.handle = self.attention.register_forward_pre_hook(self._record, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False

    def probabilities(self, source_mask, head) -> torch.Tensor:
        return cross_attention_probabilities(self.attention, self.hidden_states, self.encoder_states, source_mask, head)


__all__ = ["CrossAttentionCapture", "alignment_matrix", "cross_attention_probabilities", "guided_alignment_cost"]
