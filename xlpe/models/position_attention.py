"""Position-aware self-attention: the XL PE paper's Table 1 baselines, as options of Marian's self-attention.

* Relative position representations (Shaw et al., 2018, Eq. 3-5): learned vectors a^K_ij, a^V_ij for the
  clipped distance clip(j - i, -k, k), shared by the heads of a layer:

      e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_h)        (Eq. 4)
      z_i  = sum_j alpha_ij (v_j + a^V_ij)           (Eq. 3)

  Computed without a (L, L, d_h) tensor: q_i a^K_ij is one (L, 2k+1) product gathered by the distance bucket;
  sum_j alpha_ij a^V_ij sums alpha into the 2k+1 buckets first (Shaw Sec. 3.3 does the same reshaping). The key
  term travels as an additive attention bias, so SDPA runs it; the value term needs the attention weights and
  runs eagerly (`relative_attention_values=False` keeps SDPA throughout).
* DiSAN-style directional self-attention (Shen et al., 2018): encoder heads split into forward heads (token i
  sees j <= i) and backward heads (j >= i), as additive masks. Choices: the diagonal is kept (DiSAN masks it,
  which leaves the first token of a forward head nothing to attend to under a softmax), and DiSAN's
  feature-wise attention and fusion gate are not reproduced: the heads' outputs meet in the usual output
  projection.

Decoder self-attention keeps its cache: a query's position is the cache length before this step plus its
index, so `generate` with a cache computes what a full forward computes.

Flat file, single-dot imports only: it travels as Hub custom code next to the modeling files.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.marian.modeling_marian import MarianAttention, MarianDecoder, eager_attention_forward

from .hub_support import hf_init
from .seq2seq_scaffold import InitOwnParametersMixin
from .transformers_compat import renamed_cache_argument, take_cache

BIAS_ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")  # the ones that take an additive float bias


class RelativePositionRepresentations(nn.Module):
    """a^K and a^V of Shaw et al. (Eq. 5): one (2k+1, d_h) table each, indexed by clip(j - i, -k, k) + k."""

    def __init__(self, max_distance: int, head_dim: int, values: bool):
        super().__init__()
        self.max_distance = max_distance
        self.keys = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))  # w^K of Eq. 5
        self.values = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim)) if values else None  # w^V

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        for table in (self.keys, self.values):
            if table is not None:
                hf_init.normal_(table, std=table.shape[-1] ** -0.5)

    def buckets(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """(L_q, L_k) indices clip(j - i, -k, k) + k."""
        distance = key_positions[None, :] - query_positions[:, None]
        return distance.clamp(-self.max_distance, self.max_distance) + self.max_distance

    def key_bias(self, query: torch.Tensor, buckets: torch.Tensor, scaling: float) -> torch.Tensor:
        """q_i a^K_ij * scaling, shape (B, H, L_q, L_k): the second term of Eq. 4."""
        per_bucket = torch.matmul(query, self.keys.to(query.dtype).t()) * scaling  # (B, H, L_q, 2k+1)
        index = buckets.expand(*per_bucket.shape[:2], *buckets.shape)
        return per_bucket.gather(-1, index)

    def value_term(self, weights: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """sum_j alpha_ij a^V_ij, shape (B, H, L_q, d_h): the second term of Eq. 3."""
        per_bucket = weights.new_zeros(*weights.shape[:-1], self.values.shape[0])
        per_bucket.scatter_add_(-1, buckets.expand_as(weights), weights)
        return torch.matmul(per_bucket, self.values.to(weights.dtype))


def directional_bias(num_heads: int, query_positions: torch.Tensor, key_positions: torch.Tensor,
                     dtype: torch.dtype) -> torch.Tensor:  # fmt: skip
    """(H, L_q, L_k) additive mask: heads [0, H//2) see j <= i (forward), the others j >= i (backward)."""
    later = key_positions[None, :] > query_positions[:, None]
    earlier = key_positions[None, :] < query_positions[:, None]
    forward = torch.arange(num_heads, device=query_positions.device) < num_heads // 2
    blocked = torch.where(forward[:, None, None], later, earlier)
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill(blocked, torch.finfo(dtype).min)


class NoPositions(nn.Module):
    """Absolute positions switched off (`absolute_positions=False`): adds zeros where Marian adds its sinusoid.
    Called as `MarianSinusoidalPositionalEmbedding` is: `(input_shape, past_length, position_ids=None)` -> (L, d)."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("zero", torch.zeros(dim), persistent=False)

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.zeros_(self.zero)

    def forward(self, input_shape, cache_length: int = 0, position_ids=None) -> torch.Tensor:
        return self.zero.expand(input_shape[1], -1)


class PositionAwareSelfAttention(MarianAttention):
    """Marian self-attention with relative position representations and/or directional heads.

    Same parameter names as `MarianAttention` (stock weights load) plus `relative.keys` / `relative.values`.
    Subclasses change how Q/K/V are projected (`project`), e.g. XL PE's HeadXL attention.
    """

    def __init__(self, config, num_heads: int, *, is_decoder: bool = False, layer_idx: int | None = None,
                 relative: bool = False, directional: bool = False):  # fmt: skip
        super().__init__(config.d_model, num_heads, dropout=config.attention_dropout, is_decoder=is_decoder,
                         is_causal=is_decoder, config=config, layer_idx=layer_idx)  # fmt: skip
        distance = getattr(config, "relative_attention_max_distance", 0)
        self.relative = (
            RelativePositionRepresentations(distance, self.head_dim, config.relative_attention_values)
            if relative and distance > 0 else None
        )  # fmt: skip
        self.directional = directional

    # --- Q/K/V (overridden by HeadXL) ----------------------------------------------------------------------

    def project(self, hidden_states: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, H, L, d_h) query, key and value of `hidden_states`."""
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        return tuple(linear(hidden_states).view(shape).transpose(1, 2) for linear in (self.q_proj, self.k_proj, self.v_proj))

    @renamed_cache_argument
    def forward(self, hidden_states, key_value_states=None, past_key_values=None, attention_mask=None, cache=None,
                **kwargs):  # fmt: skip
        """`past_key_values` / `cache`: the decoder cache under the name of either transformers release (one of
        them; transformers_compat.py)."""
        cache = take_cache(past_key_values, cache)
        if key_value_states is not None:
            raise ValueError(f"{type(self).__name__} is a self-attention: key_value_states must be None")
        position_kwargs = {name: kwargs.pop(name) for name in ("xl_position_delta",) if name in kwargs}
        query, key, value = self.project(hidden_states, **position_kwargs)
        # a query's position: the cache length before this step plus its index. Taken before `update`, which
        # advances a static cache's length tensor in place
        query_positions = torch.arange(query.shape[2], device=query.device)
        if cache is not None:
            layer_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            query_positions = query_positions + layer_cache.get_seq_length(self.layer_idx)
            key, value = layer_cache.update(key, value, self.layer_idx)
        if self.relative is None and not self.directional:
            interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
            output, weights = interface(self, query, key, value, attention_mask,
                                        dropout=self.dropout if self.training else 0.0, scaling=self.scaling, **kwargs)  # fmt: skip
        else:
            output, weights = self.attend_with_positions(query, key, value, attention_mask, query_positions, **kwargs)
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1).contiguous())
        return output, weights

    # --- attention with a position bias ---------------------------------------------------------------------

    def attend_with_positions(self, query, key, value, attention_mask, query_positions, **kwargs):
        implementation = self.config._attn_implementation
        if implementation not in BIAS_ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no attention bias, which relative position "
                f"representations and directional heads need: use one of {BIAS_ATTENTION_IMPLEMENTATIONS}"
            )
        dtype = query.dtype
        key_positions = torch.arange(key.shape[2], device=query.device)
        bias = self.padding_bias(attention_mask, query_positions, key_positions, dtype)
        buckets = None
        if self.relative is not None:
            buckets = self.relative.buckets(query_positions, key_positions)
            bias = bias + self.relative.key_bias(query, buckets, self.scaling)
        if self.directional:
            bias = bias + directional_bias(self.num_heads, query_positions, key_positions, dtype)
        bias = bias.clamp(min=torch.finfo(dtype).min)  # two masks summed stay finite: a fully masked row is uniform
        values_term = self.relative is not None and self.relative.values is not None
        if values_term or implementation == "eager":
            output, weights = eager_attention_forward(self, query, key, value, bias,
                                                      dropout=self.dropout if self.training else 0.0, scaling=self.scaling)  # fmt: skip
            if values_term:
                output = output + self.relative.value_term(weights, buckets).transpose(1, 2)
            return output, weights
        return ALL_ATTENTION_FUNCTIONS["sdpa"](self, query, key, value, bias.contiguous(), dropout=self.dropout if self.training else 0.0,
                                              scaling=self.scaling, is_causal=False)  # fmt: skip

    def padding_bias(self, attention_mask, query_positions, key_positions, dtype) -> torch.Tensor:
        """The given mask as an additive float (B|1, 1|H, L_q, L_k) bias, with causality where the module is causal."""
        minimum = torch.finfo(dtype).min
        if attention_mask is None:
            bias = torch.zeros(1, 1, len(query_positions), len(key_positions), dtype=dtype, device=query_positions.device)
        elif attention_mask.dtype == torch.bool:
            bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device).masked_fill(~attention_mask, minimum)
        else:
            bias = attention_mask.to(dtype)
        if self.is_causal:
            bias = bias.masked_fill(key_positions[None, :] > query_positions[:, None], minimum)
        return bias


def apply_position_options(model_part: nn.Module, config, *, is_decoder: bool) -> None:
    """Apply the config's position options to an encoder or decoder (Marian layout: `embed_positions`, `layers`):
    `absolute_positions=False` replaces the sinusoid by `NoPositions`; relative representations (on the sides
    `relative_attention_sides` names) and directional heads (encoder only) replace each layer's self-attention by
    `PositionAwareSelfAttention`. A self-attention that is already position-aware (HeadXL) is left alone."""
    if not config.absolute_positions:
        model_part.embed_positions = NoPositions(config.d_model)
    side = "decoder" if is_decoder else "encoder"
    relative = config.relative_attention_max_distance > 0 and config.relative_attention_sides in (side, "both")
    directional = not is_decoder and config.directional_attention
    if not (relative or directional):
        return
    heads = config.decoder_attention_heads if is_decoder else config.encoder_attention_heads
    for index, layer in enumerate(model_part.layers):
        if not isinstance(layer.self_attn, PositionAwareSelfAttention):
            layer.self_attn = PositionAwareSelfAttention(config, heads, is_decoder=is_decoder, layer_idx=index,
                                                         relative=relative, directional=directional)  # fmt: skip


class PositionOptionsMarianDecoder(InitOwnParametersMixin, MarianDecoder):
    """Marian's decoder (same submodule and weight names) with the config's position options applied; its
    `_init_weights` also initialises the new modules (`init_own_parameters`), which the stock one does not know."""

    def __init__(self, config):
        super().__init__(config)
        apply_position_options(self, config, is_decoder=True)
        self.post_init()


__all__ = [
    "NoPositions",
    "PositionAwareSelfAttention",
    "PositionOptionsMarianDecoder",
    "RelativePositionRepresentations",
    "apply_position_options",
    "directional_bias",
]
