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
* ALiBi (Press et al., 2022, Sec. 3): a fixed score bias -m_h |i - j| per head (slopes m_h = 2^(-8h/H), the
  reference implementation's rule for other head counts: `alibi_slopes`), added as the relative key term is, so
  SDPA runs it; in the causal decoder j <= i, the paper's -m_h (i - j). Cross-attention is untouched.
* Cross-lingual order in an attention form (XL PE, `xl_position_form`; the forms are modules registered in
  xl_position_forms.py): in the first `xl_heads` heads the distances (relative) or angles (rotary) come from each
  token's XL position (its index in the reordered sentence) instead of its source index, scaled by XL PE's gate g
  (g = 0: those heads see no XL term, the function-preserving upgrade). The attention asks the form whether it
  rotates and/or biases the scores, never its name. The other heads keep the layer's own options (plain relative /
  rotary / none).

* RoPE's warm start from a sinusoidal checkpoint (`rotary_warm_start_steps` = S > 0): a blend b = min(1, n / S)
  that rises with n, the training forward passes a module has made (`WarmStartBlend`, saved with the weights, so a
  resumed run continues it). The rotary angles are (b m) w_k, and without absolute positions the sinusoid is scaled
  by 1 - b (`FadingSinusoid`). At b = 0 no query or key is rotated and the sinusoid is whole: the checkpoint's
  function, exactly; from n = S on, plain RoPE (alone, or beside the sinusoid). Our addition (the RoPE paper
  trains from scratch): the upgrade table of docs/training.md measures it.

Decoder self-attention keeps its cache: a query's position is the cache length before this step plus its
index, so `generate` with a cache computes what a full forward computes.

The position modules themselves (relative tables, rotary angles, directional masks, no / fading sinusoid) are in
position_modules.py. Flat file, single-dot imports only: it travels as Hub custom code next to the modeling files.
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
    eager_attention_forward,
)

from . import position_modules
from .position_modules import (
    ALiBiBias,
    FadingSinusoid,
    NoPositions,
    RelativePositionRepresentations,
    RotaryPositions,
    WarmStartBlend,
    XLPositionForm,
    directional_bias,
)
from .seq2seq_scaffold import InitOwnParametersMixin
from .transformers_compat import renamed_cache_argument, take_cache
from .xl_position_forms import attention_form_names, xl_position_form

BIAS_ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")  # the ones that take an additive float bias


# ---------------------------------------------------------------------------------------------------------
# The attention: Marian's self-attention with the position options
# ---------------------------------------------------------------------------------------------------------


def heads_split(num_heads: int, xl_heads: int, device) -> torch.Tensor:
    """(H, 1, 1) bool: True for the first `xl_heads` heads (the XL heads), broadcastable over (B, H, L_q, L_k)."""
    return (torch.arange(num_heads, device=device) < xl_heads)[:, None, None]


class PositionAwareSelfAttention(MarianAttention):
    """Marian self-attention with relative position representations, rotary positions and/or directional heads,
    and (XL PE's relative/rotary forms) XL heads whose distances or angles come from the XL positions.

    Same parameter names as `MarianAttention` (stock weights load) plus `relative.keys` / `relative.values` and the
    XL form's under its registered attribute (`xl_relative.keys` / `xl_relative.values`). Subclasses change how
    Q/K/V are projected (`project`), e.g. XL PE's HeadXL attention. `forward` takes `xl_positions` (B, L) and
    `xl_gate` (a scalar tensor) for the XL heads, whose form (xl_position_forms.py) it asks for their rotation or
    score bias.
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
        alibi: bool = False,
        xl_heads: int = 0,
        xl_form: str | None = None,
    ):
        """`xl_form`: the name of a registered XL position form that lives in the attention (xl_position_forms.py),
        for the first `xl_heads` heads."""
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
        self.alibi = ALiBiBias(num_heads) if alibi else None
        spec = xl_position_form(xl_form) if xl_form is not None else None
        if (spec is not None and not spec.in_attention) or (xl_form is None) != (xl_heads == 0):
            raise ValueError(
                f"XL heads take an xl_form of {attention_form_names()} with xl_heads >= 1, got {xl_form!r} and "
                f"{xl_heads}"
            )
        self.xl_heads = xl_heads
        self.xl_form_attribute = spec.attribute if spec is not None else None  # the form's submodule name
        if spec is not None:
            module = getattr(position_modules, spec.module) if isinstance(spec.module, str) else spec.module
            setattr(self, spec.attribute, module(config, self.head_dim))
        needs_rotation = rotary or (spec is not None and self.xl_form.rotates)
        self.rotary = rotary  # plain RoPE on the heads that are not XL heads (all heads when there are none)
        self.rotary_positions = RotaryPositions(self.head_dim, config.rotary_base) if needs_rotation else None
        warm_steps = getattr(config, "rotary_warm_start_steps", 0)  # plain RoPE's angles faded in (module doc)
        self.warm_start = WarmStartBlend(warm_steps) if rotary and warm_steps > 0 else None

    @property
    def xl_form(self) -> XLPositionForm | None:
        """The XL heads' position form (xl_position_forms.py), or None without XL heads."""
        return getattr(self, self.xl_form_attribute) if self.xl_form_attribute is not None else None

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
        form = self.xl_form
        if form is None or xl["xl_positions"] is None:
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
        xl_bias = xl if xl is not None and form.biases else None
        if self.relative is None and self.alibi is None and not self.directional and xl_bias is None:
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
                query, key, value, attention_mask, query_positions, xl_bias, **kwargs
            )
        output = self.out_proj(output.reshape(*hidden_states.shape[:-1], -1).contiguous())
        return output, weights

    def rotation_positions(self, query_positions: torch.Tensor, xl: dict | None) -> torch.Tensor:
        """Positions whose angles rotate Q and K: the query index (L,) without XL heads; with them (B, H, L): the
        XL heads take g * XL position, the others the index (plain RoPE on) or 0 (no rotation)."""
        if self.warm_start is not None:  # b * m: the warm start's angles
            query_positions = query_positions.to(torch.float32) * self.warm_start()
        if xl is None or not self.xl_form.rotates:
            return query_positions
        xl_positions = self.xl_form.rotation_positions(xl["xl_positions"], xl["xl_gate"])
        others = (
            query_positions.to(torch.float32) if self.rotary else torch.zeros_like(query_positions, dtype=torch.float32)
        )
        is_xl = heads_split(self.num_heads, self.xl_heads, query_positions.device)[None, :, :, 0]  # (1, H, 1)
        return torch.where(is_xl, xl_positions[:, None, :], others)

    # --- attention with a position bias ---------------------------------------------------------------------

    def attend_with_positions(self, query, key, value, attention_mask, query_positions, xl_bias=None, **kwargs):
        """Attention with an additive bias: padding/causal mask, relative key term (Shaw Eq. 4), ALiBi's
        -m_h |i - j|, the XL heads' form's score bias (`xl_bias`: the XL inputs, when the form biases), directional
        masks; the value terms (Shaw Eq. 3, the XL form's) after."""
        implementation = self.config._attn_implementation
        if implementation not in BIAS_ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation={implementation!r} takes no attention bias, which relative position "
                f"representations, ALiBi and directional heads need: use one of {BIAS_ATTENTION_IMPLEMENTATIONS}"
            )
        dtype = query.dtype
        key_positions = torch.arange(key.shape[2], device=query.device)
        bias = self.padding_bias(attention_mask, query_positions, key_positions, dtype)
        buckets = xl_state = None
        # with XL heads that bias the scores the plain representations serve the other heads only
        plain_heads = ~heads_split(self.num_heads, self.xl_heads, query.device) if xl_bias is not None else None
        if self.relative is not None:
            buckets = self.relative.buckets(query_positions, key_positions)
            key_term = self.relative.key_bias(query, buckets, self.scaling)
            bias = bias + (key_term if plain_heads is None else key_term * plain_heads)
        if self.alibi is not None:
            alibi = self.alibi(query_positions, key_positions, dtype)  # (H, L_q, L_k)
            bias = bias + (alibi if plain_heads is None else alibi * plain_heads)
        if xl_bias is not None:  # the XL heads' score bias from their XL positions; encoder only (no cache)
            gate = xl_bias["xl_gate"]
            xl_term, xl_state = self.xl_form.attention_bias(
                query[:, : self.xl_heads], xl_bias["xl_positions"], gate, self.scaling
            )
            bias = bias + torch.cat(
                [xl_term, xl_term.new_zeros(*xl_term.shape[:1], self.num_heads - self.xl_heads, *xl_term.shape[2:])],
                dim=1,
            )
        if self.directional:
            bias = bias + directional_bias(self.num_heads, query_positions, key_positions, dtype)
        bias = bias.clamp(min=torch.finfo(dtype).min)  # two masks summed stay finite: a fully masked row is uniform
        plain_values = self.relative is not None and self.relative.values is not None
        xl_values = xl_bias is not None and self.xl_form.value_terms
        if plain_values or xl_values or implementation == "eager":
            output, weights = eager_attention_forward(
                self, query, key, value, bias, dropout=self.dropout if self.training else 0.0, scaling=self.scaling
            )
            if plain_values:
                term = self.relative.value_term(weights, buckets)
                output = output + (term if plain_heads is None else term * plain_heads).transpose(1, 2)
            if xl_values:
                term = self.xl_form.attention_value(weights[:, : self.xl_heads], xl_state, gate)
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
    positions and ALiBi (on the sides `relative_attention_sides` / `rotary_attention_sides` /
    `alibi_attention_sides` name) and directional heads
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
    alibi = getattr(config, "alibi_attention", False) and config.alibi_attention_sides in (side, "both")
    directional = not is_decoder and config.directional_attention
    if not (relative or rotary or alibi or directional or xl_layers):
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
                alibi=alibi,
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
    "ALiBiBias",
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
