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

* Rotary position embeddings, RoPE (Su et al., 2021, Eq. 34): query and key of head h at position m are rotated
  pair-wise by the angles m * w_k, w_k = base^(-2k/d_h), so q_m . k_n depends on n - m only. Layout: the pairs
  are (k, k + d_h/2) ("rotate half", as GPT-NeoX and LLaMA; the paper's Eq. 34 pairs neighbours (2k, 2k+1), the
  same function up to a fixed permutation of the head's Q/K columns). Keys are rotated before they enter the
  cache, so a cached decoding rotates each key once. Attention itself is unchanged: SDPA and flash run it.
* Cross-lingual order in relative or rotary form (XL PE, `xl_position_form`): in the first `xl_heads` heads the
  distances (relative) or angles (rotary) come from each token's XL position (its index in the reordered
  sentence) instead of its source index, scaled by XL PE's gate g (g = 0: those heads see no XL term, the
  function-preserving upgrade). The other heads keep the layer's own options (plain relative / rotary / none).

* RoPE's warm start from a sinusoidal checkpoint (`rotary_warm_start_steps` = S > 0): a blend b = min(1, n / S)
  that rises with n, the training forward passes a module has made (`WarmStartBlend`, saved with the weights, so a
  resumed run continues it). The rotary angles are (b m) w_k, and without absolute positions the sinusoid is scaled
  by 1 - b (`FadingSinusoid`). At b = 0 no query or key is rotated and the sinusoid is whole: the checkpoint's
  function, exactly; from n = S on, plain RoPE (alone, or beside the sinusoid). Our addition (the RoPE paper
  trains from scratch): the upgrade table of docs/training.md measures it.

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
from transformers.models.marian.modeling_marian import (
    MarianAttention,
    MarianDecoder,
    MarianSinusoidalPositionalEmbedding,
    eager_attention_forward,
)

from .hub_support import hf_init
from .seq2seq_scaffold import InitOwnParametersMixin
from .transformers_compat import renamed_cache_argument, take_cache

BIAS_ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")  # the ones that take an additive float bias


# ---------------------------------------------------------------------------------------------------------
# Position modules: relative representations, directional masks, no / fading sinusoid, rotary angles
# ---------------------------------------------------------------------------------------------------------


class RelativePositionRepresentations(nn.Module):
    """a^K and a^V of Shaw et al. (Eq. 5): one (2k+1, d_h) table each, indexed by clip(j - i, -k, k) + k."""

    def __init__(self, max_distance: int, head_dim: int, values: bool, zero_init: bool = False):
        super().__init__()
        self.max_distance, self.zero_init = max_distance, zero_init  # zero_init: an upgrade's tables start at 0
        self.keys = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))  # w^K of Eq. 5
        self.values = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim)) if values else None  # w^V

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        for table in (self.keys, self.values):
            if table is not None and self.zero_init:  # q . a^K = 0 and a^V = 0: attention as without the tables
                hf_init.zeros_(table)
            elif table is not None:
                hf_init.normal_(table, std=table.shape[-1] ** -0.5)

    def buckets(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """Indices clip(j - i, -k, k) + k: (L_q, L_k) from (L_q,) and (L_k,) positions; from (B, L_q, 1) and
        (B, 1, L_k) positions (XL positions, one order per row), (B, L_q, L_k)."""
        if query_positions.dim() == 1:
            query_positions, key_positions = query_positions[:, None], key_positions[None, :]
        distance = key_positions - query_positions
        return distance.clamp(-self.max_distance, self.max_distance) + self.max_distance

    def key_bias(self, query: torch.Tensor, buckets: torch.Tensor, scaling: float) -> torch.Tensor:
        """q_i a^K_ij * scaling, shape (B, H, L_q, L_k): the second term of Eq. 4 (`buckets` (L_q, L_k) or
        (B, 1, L_q, L_k))."""
        per_bucket = torch.matmul(query, self.keys.to(query.dtype).t()) * scaling  # (B, H, L_q, 2k+1)
        index = buckets.expand(*per_bucket.shape[:2], *buckets.shape[-2:])
        return per_bucket.gather(-1, index)

    def value_term(self, weights: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """sum_j alpha_ij a^V_ij, shape (B, H, L_q, d_h): the second term of Eq. 3."""
        per_bucket = weights.new_zeros(*weights.shape[:-1], self.values.shape[0])
        per_bucket.scatter_add_(-1, buckets.expand_as(weights), weights)
        return torch.matmul(per_bucket, self.values.to(weights.dtype))


def directional_bias(
    num_heads: int, query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
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


class WarmStartBlend(nn.Module):
    """b = min(1, n / steps), n = the training forward passes made so far (a saved buffer; eval passes do not
    count, so evaluations and generation leave the schedule alone). Called once per forward of its owner, which
    counts the pass (in training mode) after reading b: the first training pass still computes b = 0."""

    def __init__(self, steps: int):
        super().__init__()
        if steps < 1:
            raise ValueError(f"a warm start takes steps >= 1, got {steps}")
        self.steps = steps
        self.register_buffer("passes", torch.zeros((), dtype=torch.float32))

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.zeros_(self.passes)

    def forward(self) -> torch.Tensor:
        blend = (self.passes / self.steps).clamp(max=1.0)
        if self.training:
            with torch.no_grad():
                self.passes.add_(1.0)
        return blend


class FadingSinusoid(MarianSinusoidalPositionalEmbedding):
    """Marian's sinusoid (same weight name) scaled by 1 - b (`WarmStartBlend`): RoPE alone reached from a
    sinusoidal checkpoint without a jump. Called as the sinusoid is; (L, d)."""

    def __init__(self, num_positions: int, dim: int, steps: int):
        super().__init__(num_positions, dim)
        self.warm_start = WarmStartBlend(steps)

    def forward(self, input_ids_shape, past_key_values_length: int = 0, position_ids=None) -> torch.Tensor:
        table = super().forward(input_ids_shape, past_key_values_length, position_ids)
        return table * (1.0 - self.warm_start()).to(table.dtype)


class RotaryPositions(nn.Module):
    """RoPE (Su et al., 2021, Eq. 34) in the rotate-half layout: x -> x * cos(p w) + rotate_half(x) * sin(p w)."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        if head_dim % 2 != 0:
            raise ValueError(
                f"rotary positions rotate pairs of a head's dimensions: the head size must be even, got {head_dim}"
            )
        self.head_dim, self.base = head_dim, base
        self.register_buffer("inverse_frequencies", self.frequencies(), persistent=False)

    def frequencies(self, device=None) -> torch.Tensor:
        """w_k = base^(-2k/d_h), k = 0 .. d_h/2 - 1 (Eq. 15 of Su et al.)."""
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device) / self.head_dim
        return self.base**-exponents

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.copy_(self.inverse_frequencies, self.frequencies(self.inverse_frequencies.device))

    def forward(self, states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`states` (B, H, L, d_h) rotated by `positions`: (L,) for every row and head, or (B, H|1, L), which may
        be fractional (XL positions scaled by the gate). Angles in fp32, then cast to the states' dtype."""
        angles = positions.to(torch.float32)[..., None] * self.inverse_frequencies  # (..., L, d_h/2)
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(states.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(states.dtype)
        first, second = states.chunk(2, dim=-1)
        return states * cos + torch.cat([-second, first], dim=-1) * sin


# ---------------------------------------------------------------------------------------------------------
# The attention: Marian's self-attention with the position options
# ---------------------------------------------------------------------------------------------------------


def heads_split(num_heads: int, xl_heads: int, device) -> torch.Tensor:
    """(H, 1, 1) bool: True for the first `xl_heads` heads (the XL heads), broadcastable over (B, H, L_q, L_k)."""
    return (torch.arange(num_heads, device=device) < xl_heads)[:, None, None]


class PositionAwareSelfAttention(MarianAttention):
    """Marian self-attention with relative position representations, rotary positions and/or directional heads,
    and (XL PE's relative/rotary forms) XL heads whose distances or angles come from the XL positions.

    Same parameter names as `MarianAttention` (stock weights load) plus `relative.keys` / `relative.values` and
    `xl_relative.keys` / `xl_relative.values`. Subclasses change how Q/K/V are projected (`project`), e.g. XL
    PE's HeadXL attention. `forward` takes `xl_positions` (B, L) and `xl_gate` (a scalar tensor) for the XL heads.
    """

    def __init__(
        self,
        config,
        num_heads: int,
        *,
        is_decoder: bool = False,
        layer_idx: int | None = None,
        relative: bool = False,
        directional: bool = False,
        rotary: bool = False,
        xl_heads: int = 0,
        xl_form: str | None = None,
    ):
        super().__init__(
            config.d_model,
            num_heads,
            dropout=config.attention_dropout,
            is_decoder=is_decoder,
            is_causal=is_decoder,
            config=config,
            layer_idx=layer_idx,
        )
        distance = getattr(config, "relative_attention_max_distance", 0)
        self.relative = (
            RelativePositionRepresentations(
                distance, self.head_dim, config.relative_attention_values, config.zero_init_added_tables
            )
            if relative and distance > 0
            else None
        )
        self.directional = directional
        if xl_form not in (None, "relative", "rotary") or (xl_form is None) != (xl_heads == 0):
            raise ValueError(
                f"XL heads take xl_form 'relative' or 'rotary' with xl_heads >= 1, got {xl_form!r} and {xl_heads}"
            )
        self.xl_heads, self.xl_form = xl_heads, xl_form
        self.xl_relative = (
            RelativePositionRepresentations(
                config.xl_relative_max_distance, self.head_dim, config.relative_attention_values
            )
            if xl_form == "relative"
            else None
        )
        needs_rotation = rotary or xl_form == "rotary"
        self.rotary = rotary  # plain RoPE on the heads that are not XL heads (all heads when there are none)
        self.rotary_positions = RotaryPositions(self.head_dim, config.rotary_base) if needs_rotation else None
        warm_steps = getattr(config, "rotary_warm_start_steps", 0)  # plain RoPE's angles faded in (module doc)
        self.warm_start = WarmStartBlend(warm_steps) if rotary and warm_steps > 0 else None

    # --- Q/K/V (overridden by HeadXL) ----------------------------------------------------------------------

    def project(self, hidden_states: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, H, L, d_h) query, key and value of `hidden_states`."""
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        return tuple(
            linear(hidden_states).view(shape).transpose(1, 2) for linear in (self.q_proj, self.k_proj, self.v_proj)
        )

    @renamed_cache_argument
    def forward(
        self, hidden_states, key_value_states=None, past_key_values=None, attention_mask=None, cache=None, **kwargs
    ):
        """`past_key_values` / `cache`: the decoder cache under the name of either transformers release (one of
        them; transformers_compat.py)."""
        cache = take_cache(past_key_values, cache)
        if key_value_states is not None:
            raise ValueError(f"{type(self).__name__} is a self-attention: key_value_states must be None")
        position_kwargs = {name: kwargs.pop(name) for name in ("xl_hidden_states",) if name in kwargs}
        xl = {name: kwargs.pop(name, None) for name in ("xl_positions", "xl_gate")}
        if self.xl_form is None or xl["xl_positions"] is None:
            xl = None  # no XL heads here, or none asked for (xl_gate = 0 is still an XL call)
        query, key, value = self.project(hidden_states, **position_kwargs)
        # a query's position: the cache length before this step plus its index. Taken before `update`, which
        # advances a static cache's length tensor in place
        query_positions = torch.arange(query.shape[2], device=query.device)
        if cache is not None:
            layer_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            query_positions = query_positions + layer_cache.get_seq_length(self.layer_idx)
        if self.rotary_positions is not None and (self.rotary or xl is not None):  # new keys sit where the new
            # queries do: rotated before they enter the cache
            rotation = self.rotation_positions(query_positions, xl)
            query, key = self.rotary_positions(query, rotation), self.rotary_positions(key, rotation)
        if cache is not None:
            key, value = layer_cache.update(key, value, self.layer_idx)
        xl_relative = xl if self.xl_relative is not None else None
        if self.relative is None and not self.directional and xl_relative is None:
            interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
            output, weights = interface(
                self,
                query,
                key,
                value,
                attention_mask,
                dropout=self.dropout if self.training else 0.0,
                scaling=self.scaling,
                **kwargs,
            )
        else:
            output, weights = self.attend_with_positions(
                query, key, value, attention_mask, query_positions, xl_relative, **kwargs
            )
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1).contiguous())
        return output, weights

    def rotation_positions(self, query_positions: torch.Tensor, xl: dict | None) -> torch.Tensor:
        """Positions whose angles rotate Q and K: the query index (L,) without XL heads; with them (B, H, L): the
        XL heads take g * XL position, the others the index (plain RoPE on) or 0 (no rotation)."""
        if self.warm_start is not None:  # b * m: the warm start's angles
            query_positions = query_positions.to(torch.float32) * self.warm_start()
        if xl is None or self.xl_form != "rotary":
            return query_positions
        xl_positions = xl["xl_positions"].to(torch.float32) * xl["xl_gate"].to(torch.float32)
        others = (
            query_positions.to(torch.float32) if self.rotary else torch.zeros_like(query_positions, dtype=torch.float32)
        )
        is_xl = heads_split(self.num_heads, self.xl_heads, query_positions.device)[None, :, :, 0]  # (1, H, 1)
        return torch.where(is_xl, xl_positions[:, None, :], others)

    # --- attention with a position bias ---------------------------------------------------------------------

    def attend_with_positions(self, query, key, value, attention_mask, query_positions, xl_relative=None, **kwargs):
        """Attention with an additive bias: padding/causal mask, relative key term (Shaw Eq. 4; in the XL heads
        from the XL positions' distances, times g), directional masks; the relative value term (Eq. 3) after."""
        implementation = self.config._attn_implementation
        if implementation not in BIAS_ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no attention bias, which relative position "
                f"representations and directional heads need: use one of {BIAS_ATTENTION_IMPLEMENTATIONS}"
            )
        dtype = query.dtype
        key_positions = torch.arange(key.shape[2], device=query.device)
        bias = self.padding_bias(attention_mask, query_positions, key_positions, dtype)
        buckets = xl_buckets = None
        # with XL relative heads the plain representations serve the other heads only
        plain_heads = ~heads_split(self.num_heads, self.xl_heads, query.device) if xl_relative is not None else None
        if self.relative is not None:
            buckets = self.relative.buckets(query_positions, key_positions)
            key_term = self.relative.key_bias(query, buckets, self.scaling)
            bias = bias + (key_term if plain_heads is None else key_term * plain_heads)
        if xl_relative is not None:  # (B, 1, L, L) distances of XL positions; encoder only (no cache)
            xl_positions, gate = xl_relative["xl_positions"], xl_relative["xl_gate"].to(dtype)
            xl_buckets = self.xl_relative.buckets(xl_positions[:, :, None], xl_positions[:, None, :])[:, None]
            xl_term = self.xl_relative.key_bias(query[:, : self.xl_heads], xl_buckets, self.scaling) * gate
            bias = bias + torch.cat(
                [xl_term, xl_term.new_zeros(*xl_term.shape[:1], self.num_heads - self.xl_heads, *xl_term.shape[2:])],
                dim=1,
            )
        if self.directional:
            bias = bias + directional_bias(self.num_heads, query_positions, key_positions, dtype)
        bias = bias.clamp(min=torch.finfo(dtype).min)  # two masks summed stay finite: a fully masked row is uniform
        plain_values = self.relative is not None and self.relative.values is not None
        xl_values = xl_relative is not None and self.xl_relative.values is not None
        if plain_values or xl_values or implementation == "eager":
            output, weights = eager_attention_forward(
                self, query, key, value, bias, dropout=self.dropout if self.training else 0.0, scaling=self.scaling
            )
            if plain_values:
                term = self.relative.value_term(weights, buckets)
                output = output + (term if plain_heads is None else term * plain_heads).transpose(1, 2)
            if xl_values:
                term = self.xl_relative.value_term(weights[:, : self.xl_heads], xl_buckets) * gate
                output = output + torch.cat(
                    [term, term.new_zeros(*term.shape[:1], self.num_heads - self.xl_heads, *term.shape[2:])], dim=1
                ).transpose(1, 2)
            return output, weights
        return ALL_ATTENTION_FUNCTIONS["sdpa"](
            self,
            query,
            key,
            value,
            bias.contiguous(),
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=False,
        )

    def padding_bias(self, attention_mask, query_positions, key_positions, dtype) -> torch.Tensor:
        """The given mask as an additive float (B|1, 1|H, L_q, L_k) bias, with causality where the module is causal."""
        minimum = torch.finfo(dtype).min
        if attention_mask is None:
            bias = torch.zeros(
                1, 1, len(query_positions), len(key_positions), dtype=dtype, device=query_positions.device
            )
        elif attention_mask.dtype == torch.bool:
            bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device).masked_fill(
                ~attention_mask, minimum
            )
        else:
            bias = attention_mask.to(dtype)
        if self.is_causal:
            bias = bias.masked_fill(key_positions[None, :] > query_positions[:, None], minimum)
        return bias


# ---------------------------------------------------------------------------------------------------------
# Applying the options to an encoder or decoder
# ---------------------------------------------------------------------------------------------------------


def apply_position_options(
    model_part: nn.Module,
    config,
    *,
    is_decoder: bool,
    xl_heads: int = 0,
    xl_form: str | None = None,
    xl_layers: tuple[int, ...] = (),
) -> None:
    """Apply the config's position options to an encoder or decoder (Marian layout: `embed_positions`, `layers`):
    `absolute_positions=False` replaces the sinusoid by `NoPositions`; relative representations and rotary
    positions (on the sides `relative_attention_sides` / `rotary_attention_sides` name) and directional heads
    (encoder only) replace each layer's self-attention by `PositionAwareSelfAttention`; so do XL heads in relative
    or rotary form (`xl_heads` of the layers `xl_layers`, XL PE's encoder). A self-attention that is already
    position-aware (HeadXL) is left alone."""
    warm_steps = getattr(config, "rotary_warm_start_steps", 0)
    if not config.absolute_positions and warm_steps > 0:  # RoPE alone, reached from the sinusoid (module doc)
        model_part.embed_positions = FadingSinusoid(config.max_position_embeddings, config.d_model, warm_steps)
    elif not config.absolute_positions:
        model_part.embed_positions = NoPositions(config.d_model)
    side = "decoder" if is_decoder else "encoder"
    relative = config.relative_attention_max_distance > 0 and config.relative_attention_sides in (side, "both")
    rotary = config.rotary_attention and config.rotary_attention_sides in (side, "both")
    directional = not is_decoder and config.directional_attention
    if not (relative or rotary or directional or xl_layers):
        return
    heads = config.decoder_attention_heads if is_decoder else config.encoder_attention_heads
    for index, layer in enumerate(model_part.layers):
        if not isinstance(layer.self_attn, PositionAwareSelfAttention):
            xl = {"xl_heads": xl_heads, "xl_form": xl_form} if index in xl_layers else {}
            layer.self_attn = PositionAwareSelfAttention(
                config,
                heads,
                is_decoder=is_decoder,
                layer_idx=index,
                relative=relative,
                directional=directional,
                rotary=rotary,
                **xl,
            )


class PositionOptionsMarianDecoder(InitOwnParametersMixin, MarianDecoder):
    """Marian's decoder (same submodule and weight names) with the config's position options applied; its
    `_init_weights` also initialises the new modules (`init_own_parameters`), which the stock one does not know."""

    def __init__(self, config):
        super().__init__(config)
        apply_position_options(self, config, is_decoder=True)
        self.post_init()


__all__ = [
    "FadingSinusoid",
    "NoPositions",
    "PositionAwareSelfAttention",
    "PositionOptionsMarianDecoder",
    "RelativePositionRepresentations",
    "RotaryPositions",
    "WarmStartBlend",
    "apply_position_options",
    "directional_bias",
]
