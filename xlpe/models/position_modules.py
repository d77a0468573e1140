"""The position modules the attention options are built from, each a small `nn.Module` (or a function):

* `RelativePositionRepresentations`: Shaw et al. (2018), Eq. 3-5: learned vectors a^K_ij, a^V_ij for the clipped
  distance clip(j - i, -k, k), shared by the heads of a layer:

      e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_h)        (Eq. 4)
      z_i  = sum_j alpha_ij (v_j + a^V_ij)           (Eq. 3)

  computed without a (L, L, d_h) tensor: q_i a^K_ij is one (L, 2k+1) product gathered by the distance bucket;
  sum_j alpha_ij a^V_ij sums alpha into the 2k+1 buckets first (Shaw Sec. 3.3 does the same reshaping);
* `directional_bias`: DiSAN-style (Shen et al., 2018) forward and backward heads as additive masks;
* `RotaryPositions`: RoPE (Su et al., 2021, Eq. 34) in the rotate-half layout;
* `ALiBiBias`: ALiBi (Press et al., ICLR 2022, Sec. 3): a fixed score bias -m_h |i - j| per head, slopes
  `alibi_slopes`;
* `NoPositions`, `FadingSinusoid`, `WarmStartBlend`: absolute positions switched off, or faded out while RoPE is
  faded in from a sinusoidal checkpoint (position_attention.py says how the attention uses them);
* `XLPositionForm` and the built-in `XLRelativeForm`, `XLRotaryForm`, `XLALiBiForm`: how XL PE's XL heads see XL
  positions inside the attention (the table of forms, and what each is: xl_position_forms.py).

Flat file, single-dot imports only: it travels as Hub custom code next to the modeling files.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

from .hub_support import hf_init

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


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The (H,) head slopes m_h of ALiBi (Press et al., 2022, Sec. 3). For H a power of two, the geometric sequence
    m_h = 2^(-8h/H), h = 1 .. H (H = 8: 1/2, 1/4, ..., 1/256). Otherwise the reference implementation's rule
    (github.com/ofirpress/attention_with_linear_biases; BLOOM's and MPT's too): the slopes of n = 2^floor(log2 H)
    heads, then every other slope of 2n heads (interleaved with those), the first H - n of them."""
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"ALiBi needs num_heads >= 1, got {num_heads!r}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    power = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(power) + geometric(2 * power)[0::2][: num_heads - power]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiBias(nn.Module):
    """ALiBi (Press et al., 2022, Eq. in Sec. 3): softmax(q_i K^T / sqrt(d_h) + m_h [-(i-1), ..., -2, -1, 0]), here
    as a score bias -m_h |i - j| for every key j (the encoder's keys lie on both sides of i; in the causal decoder
    j <= i, so it is the paper's -m_h (i - j)). No parameters: the slopes are a buffer rebuilt by
    `init_own_parameters` (not saved)."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.copy_(self.slopes, alibi_slopes(self.num_heads).to(self.slopes.device))

    def forward(self, query_positions, key_positions, dtype: torch.dtype, heads: int | None = None) -> torch.Tensor:
        """-m_h |i - j| for the first `heads` heads (all by default): (H, L_q, L_k) from (L_q,) and (L_k,)
        positions; (B, H, L_q, L_k) from (B, L_q, 1) and (B, 1, L_k) positions (XL positions, one order per row).
        Distances in fp32, then cast to `dtype`."""
        if query_positions.dim() == 1:
            query_positions, key_positions = query_positions[:, None], key_positions[None, :]
        distance = (key_positions - query_positions).abs().to(torch.float32)  # (L_q, L_k) or (B, L_q, L_k)
        slopes = self.slopes[:heads] if heads is not None else self.slopes
        return (-slopes[:, None, None] * distance[..., None, :, :]).to(dtype)


# ---------------------------------------------------------------------------------------------------------
# XL PE's attention forms (xl_position_forms.py is their table): the interface, the built-in three
# ---------------------------------------------------------------------------------------------------------


class XLPositionForm(nn.Module):
    """What the attention asks an XL form (all on the XL heads, the first `xl_heads` of a layer):

    * `rotates`: `rotation_positions(xl_positions, gate)` gives the (B, L) positions whose angles rotate their
      queries and keys;
    * `biases`: `attention_bias(query, xl_positions, gate, scaling)` gives an additive (B, H_xl, L, L) score bias
      and a state that `attention_value(weights, state, gate)` turns into a (B, H_xl, L, d_h) value term when
      `value_terms` is set."""

    rotates = False
    biases = False
    value_terms = False

    def rotation_positions(self, xl_positions: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not rotate")

    def attention_bias(self, query, xl_positions, gate, scaling: float) -> tuple[torch.Tensor, object]:
        raise NotImplementedError(f"{type(self).__name__} adds no score bias")

    def attention_value(self, weights, state, gate) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} adds no value term")


class XLRelativeForm(RelativePositionRepresentations, XLPositionForm):
    """Shaw distances of XL positions (one order per row), times g: the key term of Eq. 4 as a score bias and,
    with `relative_attention_values`, the value term of Eq. 3. Its tables are `keys` / `values`."""

    biases = True

    def __init__(self, config, head_dim: int):
        super().__init__(config.xl_relative_max_distance, head_dim, config.relative_attention_values)
        self.value_terms = self.values is not None

    def attention_bias(self, query, xl_positions, gate, scaling):
        buckets = self.buckets(xl_positions[:, :, None], xl_positions[:, None, :])[:, None]  # (B, 1, L, L)
        return self.key_bias(query, buckets, scaling) * gate.to(query.dtype), buckets

    def attention_value(self, weights, state, gate):
        return self.value_term(weights, state) * gate.to(weights.dtype)


class XLRotaryForm(XLPositionForm):
    """RoPE angles of g * XL position (fractional while g < 1): no parameters, the attention's rotation."""

    rotates = True

    def __init__(self, config, head_dim: int):
        super().__init__()

    def rotation_positions(self, xl_positions, gate):
        return xl_positions.to(torch.float32) * gate.to(torch.float32)


class XLALiBiForm(ALiBiBias, XLPositionForm):
    """ALiBi on XL distances, times g: the XL heads' score bias -g m_h |pi(i) - pi(j)| (pi: the XL positions, one
    order per row). Head h of the XL heads takes the slope head h of a plain ALiBi layer of
    `encoder_attention_heads` heads takes, so monotone XL positions at g = 1 give plain ALiBi's heads. No
    parameters, no value term."""

    biases = True

    def __init__(self, config, head_dim: int):
        super().__init__(config.encoder_attention_heads)

    def attention_bias(self, query, xl_positions, gate, scaling):
        bias = self(xl_positions[:, :, None], xl_positions[:, None, :], query.dtype, heads=query.shape[1])
        return bias * gate.to(query.dtype), None


__all__ = [
    "ALiBiBias",
    "FadingSinusoid",
    "NoPositions",
    "RelativePositionRepresentations",
    "RotaryPositions",
    "WarmStartBlend",
    "XLALiBiForm",
    "XLPositionForm",
    "XLRelativeForm",
    "XLRotaryForm",
    "alibi_slopes",
    "directional_bias",
]
