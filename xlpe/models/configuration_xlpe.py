"""Configuration of the XL PE model family (Ding et al., "Self-Attention with Cross-Lingual Position
Representation"): a `MarianConfig` plus the position-variant fields.

This file is also the `configuration_xlpe.py` that a Hub repository's custom code carries: it imports only
from transformers (no `xlpe` import), so `AutoConfig.from_pretrained(dir, trust_remote_code=True)` works where
the package is not installed.
"""

from __future__ import annotations

from transformers import AutoConfig, MarianConfig

from .config_checks import ValidatedConfigMixin, check_choice, check_number
from .configuration_position_options import PositionOptionsConfigMixin
from .configuration_source_tags import SourceTagsConfigMixin
from .strategies import INPUT_FUSION, XL_HEADS, strategy_names, strategy_traits
from .xl_position_forms import XL_POSITION_FORMS, attention_form_names

FAMILY = "xlpe"  # the registry name whose strategies (strategies.py) `xl_strategy` chooses from
XL_FUSIONS = ("diagonal", "full")
XL_TRAIN_POSITIONS = ("oracle", "predicted")
XL_POSITION_LAYERS = ("first", "all")
REORDER_LOSSES = ("pairwise", "mse")
REORDER_UNITS = ("word", "token")


class XLPEMarianConfig(ValidatedConfigMixin, PositionOptionsConfigMixin, SourceTagsConfigMixin, MarianConfig):
    """MarianConfig with cross-lingual position encoding fields (paper Sec. 3; equations cited per field), and the
    position options of the paper's baselines (`PositionOptionsConfigMixin`: relative PE, DiSAN-style heads, no
    absolute PE), which stack with every XL strategy, and source POS tags (`SourceTagsConfigMixin`: XL PE + POS).

    Every MarianConfig argument is accepted. The XL fields (one-line meaning each):
    """

    model_type = "xlpe_marian"

    # --- where the XL signal enters (Sec. 3.2) ---
    xl_strategy: str = (
        "combination"  # strategies.py: "none" | "in" (Eq. 7-8) | "head" (Eq. 9-11) | "combination" (fn. 2)
    )
    xl_heads: int | None = None  # tau: first-layer heads fed X+PE_XL (Eq. 9-11); None -> H // 4 (paper: 4 of 16)
    # --- how the XL heads see XL positions (docs/xl_pe.md, "XL order in relative and rotary form") ---
    # xl_position_form (xl_position_forms.py): "absolute": X + PE_XL (Eq. 9); "relative": Shaw distances of XL
    # positions; "rotary": RoPE angles of them; or a registered form
    xl_position_form: str = "absolute"
    # xl_position_layers (relative/rotary form): the tau heads of layer 1 ("first", HeadXL's place) or of every
    # encoder layer ("all")
    xl_position_layers: str = "first"
    xl_relative_max_distance: int = 16  # k clipping the XL distances of the relative form: clip(xl_j - xl_i, -k, k)
    # --- the InXL fusion PE_In-XL = tanh(PE_abs U + PE_XL V) (Eq. 7) ---
    xl_fusion: str = "diagonal"  # "diagonal": U, V are d-vectors (2d params, the paper's +0.01M); "full": d x d
    xl_fusion_init_scale: float = 0.5  # U and V start as this times identity: tanh((PE_abs + PE_XL) / 2)
    xl_gate_init: float = 1.0  # g in PE_abs + g*(PE_xl_side - PE_abs): 1 = paper from step one, 0 = upgrade
    # --- which positions the translation loss sees during training ---
    xl_train_positions: str = "oracle"  # "oracle": given reorder_positions; "predicted": the predictor's
    # --- the reorder predictor that supplies positions at test time (reorder_predictor.py) ---
    reorder_predictor_layers: int = 1  # Transformer layers of the predictor (0 = linear scorer)
    reorder_predictor_hidden_size: int | None = None  # None -> d_model / 4 (>= 32), a multiple of the heads
    reorder_predictor_heads: int = 4  # attention heads of the predictor
    reorder_predictor_ffn_size: int | None = None  # feed-forward width of its layers; None -> 4 x hidden size
    reorder_predictor_dropout: float = 0.0  # dropout inside the predictor (0.1 measured no better, and slower)
    reorder_predictor_detach_input: bool = True  # predictor loss does not update the translation embeddings
    reorder_loss: str = "pairwise"  # "pairwise" ranking loss or "mse" on normalised ranks
    reorder_unit: str = "word"  # test time: "word" ranks whole words (mean of their pieces' scores), "token" each piece
    label_smoothing: float = 0.0  # epsilon of the label-smoothed translation loss (papers: 0.1); set by the trainer
    reorder_loss_weight: float = 1.0  # loss = translation_loss + weight * reorder_loss (reported separately)
    reorder_fixed_token_ids: list[int] | None = None  # extra token ids that keep their place (EOS/pad always do)
    reorderer_config: dict | None = None  # a standalone reorderer (configuration_reorderer.py) that predicts instead
    # --- input checking ---
    check_inputs: bool = (
        True  # value checks in forward: ids in the vocabulary, right padding, reorder_positions (permutation)
    )

    def __post_init__(self, **kwargs):
        # derived defaults (before the checks, so that they are checked too)
        if self.xl_heads is None:
            self.xl_heads = max(1, self.encoder_attention_heads // 4) if XL_HEADS in self.xl_traits else 0
        if (
            self.reorder_predictor_hidden_size is None
            and isinstance(self.reorder_predictor_heads, int)
            and self.reorder_predictor_heads > 0
        ):
            heads = self.reorder_predictor_heads  # d/4: see docs/benchmarks/speed.md
            self.reorder_predictor_hidden_size = -(-max(32, self.d_model // 4) // heads) * heads
        if self.reorder_predictor_ffn_size is None and isinstance(self.reorder_predictor_hidden_size, int):
            self.reorder_predictor_ffn_size = 4 * self.reorder_predictor_hidden_size
        self.fill_source_tag_defaults()
        super().__post_init__(**kwargs)
        self.validate()

    @property
    def xl_traits(self) -> frozenset:
        """What the strategy switches on (strategies.py): `INPUT_FUSION` (InXL), `XL_HEADS` (HeadXL), both, none."""
        return strategy_traits(FAMILY, self.xl_strategy)

    @property
    def uses_xl(self) -> bool:
        """Does the model read XL positions at all (an InXL input, or at least one XL head)? Computed here once;
        the model, the export and the checks read it."""
        traits = self.xl_traits
        return INPUT_FUSION in traits or (XL_HEADS in traits and isinstance(self.xl_heads, int) and self.xl_heads > 0)

    def validate_family_fields(self):
        """The XL fields (run at construction, after `from_pretrained` keywords, and by `validate()`)."""
        check_choice("xl_strategy", self.xl_strategy, strategy_names(FAMILY))
        check_choice("xl_fusion", self.xl_fusion, XL_FUSIONS)
        check_choice("xl_train_positions", self.xl_train_positions, XL_TRAIN_POSITIONS)
        check_choice("reorder_unit", self.reorder_unit, REORDER_UNITS)
        check_choice("reorder_loss", self.reorder_loss, REORDER_LOSSES)
        check_choice("xl_position_form", self.xl_position_form, tuple(XL_POSITION_FORMS))
        form = XL_POSITION_FORMS[self.xl_position_form]  # what it needs: the table (xl_position_forms.py)
        check_choice("xl_position_layers", self.xl_position_layers, XL_POSITION_LAYERS)
        check_number("xl_relative_max_distance", self.xl_relative_max_distance, 1, integer=True)
        heads = self.encoder_attention_heads
        check_number(f"xl_heads (tau, of encoder_attention_heads={heads})", self.xl_heads, 0, heads, integer=True)
        if XL_HEADS not in self.xl_traits and self.xl_heads != 0:
            with_heads = [name for name in strategy_names(FAMILY) if XL_HEADS in strategy_traits(FAMILY, name)]
            raise ValueError(
                f"xl_heads={self.xl_heads} only applies to xl_strategy {' or '.join(map(repr, with_heads))}, "
                f"not {self.xl_strategy!r}: set xl_heads=0 or change the strategy"
            )
        if form.in_attention and (self.xl_traits != {XL_HEADS} or self.xl_heads == 0):
            raise ValueError(
                f"xl_position_form={self.xl_position_form!r} gives XL distances/angles to the tau XL heads: it needs "
                f"xl_strategy='head' and xl_heads >= 1, got xl_strategy={self.xl_strategy!r}, xl_heads={self.xl_heads} "
                "(InXL and Combination add an absolute PE_In-XL, Eq. 7: use xl_position_form='absolute' for them)"
            )
        if self.xl_position_layers == "all" and not form.in_attention:
            raise ValueError(
                f"xl_position_layers='all' applies to an xl_position_form of {attention_form_names()}; the "
                f"{self.xl_position_form} form feeds X + PE_XL to the heads of layer 1 only (Eq. 9): set "
                "xl_position_layers='first'"
            )
        if form.even_head_dim and (self.d_model // self.encoder_attention_heads) % 2 != 0:
            raise ValueError(
                f"xl_position_form={self.xl_position_form!r} rotates pairs of a head's dimensions: d_model / "
                f"encoder_attention_heads = {self.d_model} / {self.encoder_attention_heads} must be even"
            )
        self.validate_position_options()
        self.validate_source_tags()
        check_number("reorder_predictor_layers", self.reorder_predictor_layers, 0, integer=True)
        check_number("reorder_predictor_heads", self.reorder_predictor_heads, 1, integer=True)
        check_number("reorder_predictor_hidden_size", self.reorder_predictor_hidden_size, 1, integer=True)
        check_number("reorder_predictor_ffn_size", self.reorder_predictor_ffn_size, 1, integer=True)
        if self.reorder_predictor_hidden_size % self.reorder_predictor_heads != 0:
            raise ValueError(
                f"reorder_predictor_hidden_size ({self.reorder_predictor_hidden_size}) must be divisible by "
                f"reorder_predictor_heads ({self.reorder_predictor_heads})"
            )
        check_number("reorder_predictor_dropout", self.reorder_predictor_dropout, 0.0, 1.0, high_inclusive=False)
        check_number("label_smoothing", self.label_smoothing, 0.0, 1.0, high_inclusive=False)
        check_number("reorder_loss_weight", self.reorder_loss_weight, 0.0)
        check_number("xl_gate_init", self.xl_gate_init, 0.0, 1.0)
        check_number("xl_fusion_init_scale", self.xl_fusion_init_scale)

    def validate_position_options(self):
        """The shared rules (configuration_position_options.py), then XL PE's (docs/xl_pe.md, "Baselines and
        stacking")."""
        super().validate_position_options()
        form = XL_POSITION_FORMS.get(self.xl_position_form)  # an unknown one is refused by its own check
        if self.uses_xl and not self.absolute_positions and form is not None and not form.in_attention:
            raise ValueError(
                f"xl_strategy={self.xl_strategy!r} needs absolute_positions=True: XL PE fuses PE_abs with PE_XL "
                "(Eq. 7) and its first layer's residual carries X + PE_abs (Eq. 9); use xl_strategy='none' for a "
                f"model without absolute positions, or an xl_position_form of {attention_form_names()}, which need no "
                "PE_abs"
            )
        if XL_HEADS in self.xl_traits and self.xl_heads > 0 and self.encoder_layers == 0:
            raise ValueError(
                f"xl_strategy={self.xl_strategy!r} feeds XL positions to heads of the first encoder layer (Eq. 9-11), "
                "but encoder_layers=0: use xl_strategy='in' for an encoder-free model (the paper's Table 4)"
            )


def __getattr__(name: str):
    if name == "XL_STRATEGIES":  # the old constant: now the strategy table's names (strategies.py), read when asked
        return strategy_names(FAMILY)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


XLPEMarianConfig.register_for_auto_class()  # config.json's auto_map names this file (Hub custom code)
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoConfig.register(XLPEMarianConfig.model_type, XLPEMarianConfig, exist_ok=True)


__all__ = ["XLPEMarianConfig"]
