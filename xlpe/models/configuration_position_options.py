"""Config fields of the position options every Marian-based family takes (the XL PE paper's Table 1 baselines and
Table 4 setting, rotary positions and ALiBi; the modules are in position_attention.py): one declaration, mixed into each
family's config.

This file travels as Hub custom code next to the configuration files: it imports only from transformers' siblings
here (no `xlpe` import).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config_checks import check_choice, check_number

RELATIVE_ATTENTION_SIDES = ("encoder", "decoder", "both")
GUIDED_ALIGNMENT_COSTS = ("ce", "mse")


def sides(value: str) -> set[str]:
    """The self-attentions a `*_sides` value names."""
    return {"encoder", "decoder"} if value == "both" else {value}


@dataclass
class PositionOptionsConfigMixin:
    """Between `ValidatedConfigMixin` and the stock config in a family config's bases; the family calls
    `validate_position_options()` from its `validate_family_fields` and adds its own composition rules."""

    absolute_positions: bool = True  # False: no sinusoid on either side (Shaw's relative-only model; Table 4's noPos)
    relative_attention_max_distance: int = 0  # k, Shaw et al.'s clipping distance (Eq. 5; they use 16); 0 = off
    relative_attention_values: bool = True  # also a^V on the values (Shaw Eq. 3); False: keys only, SDPA throughout
    relative_attention_sides: str = (
        "both"  # which self-attentions get relative representations: "encoder" | "decoder" | "both"
    )
    directional_attention: bool = False  # DiSAN-style: half the encoder heads see j <= i, the other half j >= i
    rotary_attention: bool = False  # RoPE (Su et al. 2021, Eq. 34): self-attention Q/K rotated by position angles
    rotary_attention_sides: str = "both"  # which self-attentions rotate: "encoder" | "decoder" | "both"
    # ALiBi (Press et al. 2022, Sec. 3): self-attention scores biased by -m_h |i - j|, fixed slopes m_h per head
    alibi_attention: bool = False
    alibi_attention_sides: str = "both"  # which self-attentions get the bias: "encoder" | "decoder" | "both"
    rotary_base: float = 10000.0  # base of the rotary frequencies w_k = base^(-2k/d_head)
    # > 0: RoPE fades in over this many training forward passes (angles b m w_k, b: 0 -> 1) and, without absolute
    # positions, the sinusoid fades out (x (1 - b)): a function-preserving upgrade of a sinusoidal checkpoint
    rotary_warm_start_steps: int = 0
    # True: the tables an upgrade adds (relative a^K/a^V, the source tag table) start at 0, so a model upgraded from
    # a stock checkpoint computes the stock function at step 0 (set by `from_pretrained` on a stock checkpoint)
    zero_init_added_tables: bool = False
    # guided alignment (Garg et al. 2019, Sec. 4; guided_alignment.py): one cross-attention supervised by the links
    guided_alignment_weight: float = 0.0  # loss = L_translation + weight * L_alignment; 0 = off (no extra compute)
    guided_alignment_layer: int = -1  # decoder layer whose cross-attention is supervised; negative = from the last
    guided_alignment_head: int | None = None  # the supervised head; None = the average of the layer's heads
    guided_alignment_cost: str = "ce"  # "ce": -sum A log p / #positions; "mse": sum (p - A)^2 / #positions

    def validate_position_options(self) -> None:
        """The rules every family shares (docs/xl_pe.md, "Baselines and stacking")."""
        check_choice("relative_attention_sides", self.relative_attention_sides, RELATIVE_ATTENTION_SIDES)
        check_number("relative_attention_max_distance", self.relative_attention_max_distance, 0, integer=True)
        check_choice("rotary_attention_sides", self.rotary_attention_sides, RELATIVE_ATTENTION_SIDES)
        check_choice("alibi_attention_sides", self.alibi_attention_sides, RELATIVE_ATTENTION_SIDES)
        check_number("rotary_base", self.rotary_base, 1.0, low_inclusive=False)
        check_number("rotary_warm_start_steps", self.rotary_warm_start_steps, 0, integer=True)
        self.validate_guided_alignment()
        if self.rotary_warm_start_steps > 0 and not self.rotary_attention:
            raise ValueError(
                f"rotary_warm_start_steps={self.rotary_warm_start_steps} fades RoPE in: it needs rotary_attention=True"
            )
        for name in (
            "absolute_positions",
            "relative_attention_values",
            "directional_attention",
            "rotary_attention",
            "alibi_attention",
            "zero_init_added_tables",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.directional_attention and self.encoder_layers == 0:
            raise ValueError("directional_attention masks encoder self-attention heads, but encoder_layers=0")
        if self.directional_attention and self.encoder_attention_heads < 2:
            raise ValueError(
                "directional_attention splits the encoder heads into forward and backward ones: it needs "
                f"encoder_attention_heads >= 2, got {self.encoder_attention_heads}"
            )
        if self.rotary_attention:
            for side in ("encoder", "decoder"):
                heads = getattr(self, f"{side}_attention_heads")
                if self.rotary_attention_sides in (side, "both") and (self.d_model // heads) % 2 != 0:
                    raise ValueError(
                        f"rotary_attention rotates pairs of a head's dimensions: d_model / {side}_attention_heads "
                        f"= {self.d_model} / {heads} must be even"
                    )
            if self.rotary_attention_sides == "encoder" and self.encoder_layers == 0:
                raise ValueError(
                    "rotary_attention_sides='encoder' with encoder_layers=0: there is no encoder self-attention"
                )
        if self.alibi_attention:
            if self.alibi_attention_sides == "encoder" and self.encoder_layers == 0:
                raise ValueError(
                    "alibi_attention_sides='encoder' with encoder_layers=0: there is no encoder self-attention"
                )
            shared = sides(self.alibi_attention_sides) & sides(self.relative_attention_sides)
            if self.relative_attention_max_distance > 0 and shared:
                raise ValueError(
                    f"alibi_attention and relative_attention_max_distance={self.relative_attention_max_distance} "
                    f"both bias the {' and '.join(sorted(shared))} self-attention scores by distance: choose one "
                    "(or set alibi_attention_sides / relative_attention_sides to different sides)"
                )
        if (
            self.relative_attention_max_distance > 0
            and self.relative_attention_sides == "encoder"
            and self.encoder_layers == 0
        ):
            raise ValueError(
                "relative_attention_sides='encoder' with encoder_layers=0: there is no encoder self-attention"
            )

    def validate_guided_alignment(self) -> None:
        """The guided alignment fields: a weight >= 0, a layer and head that exist, a known cost."""
        check_number("guided_alignment_weight", self.guided_alignment_weight, 0.0)
        check_choice("guided_alignment_cost", self.guided_alignment_cost, GUIDED_ALIGNMENT_COSTS)
        layers, heads = self.decoder_layers, self.decoder_attention_heads
        layer = self.guided_alignment_layer
        if isinstance(layer, bool) or not isinstance(layer, int) or not -layers <= layer < layers:
            raise ValueError(
                f"guided_alignment_layer must be an integer in [{-layers}, {layers}) (decoder_layers={layers}; "
                f"-1 = the last), got {layer!r}"
            )
        head = self.guided_alignment_head
        if head is not None and (isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads):
            raise ValueError(
                f"guided_alignment_head must be None (the average of the heads) or an integer in [0, {heads}) "
                f"(decoder_attention_heads={heads}), got {head!r}"
            )


__all__ = ["GUIDED_ALIGNMENT_COSTS", "PositionOptionsConfigMixin", "RELATIVE_ATTENTION_SIDES"]
