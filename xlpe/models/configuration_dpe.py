"""Configuration of the DPE model family (Zheng et al., "Dynamic Position Encoding for Transformers"):
a `MarianConfig` plus the DPE block and order-loss fields, and the parameter-matched baselines of Table 5.

This file is also the `configuration_dpe.py` that a Hub repository's custom code carries: it imports only
from transformers (no `xlpe` import), so `AutoConfig.from_pretrained(dir, trust_remote_code=True)` works where
the package is not installed.
"""

from __future__ import annotations

from transformers import AutoConfig, MarianConfig

from .config_checks import ValidatedConfigMixin, check_choice, check_number
from .configuration_position_options import PositionOptionsConfigMixin
from .configuration_source_tags import SourceTagsConfigMixin

LAMBDA_SIDES = ("translation", "order")
ORDER_LOSS_NORMALIZATIONS = ("mean", "reference")


class DPEMarianConfig(ValidatedConfigMixin, PositionOptionsConfigMixin, SourceTagsConfigMixin, MarianConfig):
    """MarianConfig with a dynamic position encoding block (paper Sec. 3.2, Eq. 1-2), and the position options of
    the XL PE paper's baselines (`PositionOptionsConfigMixin`: relative PE and DiSAN-style heads on the translation
    layers; absolute positions stay, the DPE block and its order loss are built on them), and source POS tags
    (`SourceTagsConfigMixin`: DPE + POS; the DPE block reads the tagged input).

    Every MarianConfig argument is accepted. The DPE fields (one-line meaning each):
    """

    model_type = "dpe_marian"

    # --- the DPE block: N encoder layers over the enriched embeddings, r_i = DPE(w_i + p_i) (Sec. 3.2) ---
    dpe_layers: int = 2  # N, Transformer layers of the DPE block, encoder width/heads/FFN (paper: 2)
    dpe_gate_init: float = 1.0  # g in r_used = PE + g*(r - PE): 1 = the paper (r replaces PE), 0 = stock function
    dpe_learn_gate: bool = True  # False: g stays at dpe_gate_init (with 1.0, exactly the paper's architecture)
    # --- the order loss and the total loss (Eq. 1-2) ---
    order_loss_weight: float = 0.5  # lambda of Eq. 2, in [0, 1] (paper: 0.5 on WMT14, 0.3 on IWSLT14)
    order_loss_lambda_side: str = "translation"  # "translation": lambda*L_tr + (1-lambda)*L_order (Eq. 2);
    #   "order": (1-lambda)*L_tr + lambda*L_order (the public reference code; identical at lambda = 0.5)
    order_loss_normalization: str = "mean"  # "mean": L_order of Eq. 1 as is (both losses per-token means);
    #   "reference": L_order / #target tokens, the effective weight of the reference code (summed CE, mean MSE,
    #   gradients divided by the target token count)
    label_smoothing: float = 0.0  # epsilon of the label-smoothed translation loss (papers: 0.1); set by the trainer
    # --- input checking ---
    check_inputs: bool = True  # value checks in forward: ids in the vocabulary, right padding, target_positions (range)

    def __post_init__(self, **kwargs):
        self.fill_source_tag_defaults()
        super().__post_init__(**kwargs)
        self.validate()

    def validate_family_fields(self):
        """The DPE fields (run at construction, after `from_pretrained` keywords, and by `validate()`)."""
        check_number("dpe_layers", self.dpe_layers, 1, integer=True)
        check_number("dpe_gate_init", self.dpe_gate_init, 0.0, 1.0)
        check_number("label_smoothing", self.label_smoothing, 0.0, 1.0, high_inclusive=False)
        check_number("order_loss_weight (lambda of Eq. 2)", self.order_loss_weight, 0.0, 1.0)
        check_choice("order_loss_lambda_side", self.order_loss_lambda_side, LAMBDA_SIDES)
        check_choice("order_loss_normalization", self.order_loss_normalization, ORDER_LOSS_NORMALIZATIONS)
        self.validate_position_options()
        self.validate_source_tags()
        if not self.absolute_positions:
            raise ValueError(
                "DPE needs absolute_positions=True: its block reads X + PE and its order loss pulls the block "
                "toward PE rows of the target positions (Eq. 1)"
            )

    def loss_weights(self) -> tuple[float, float]:
        """(weight of L_translation, weight of L_order) in the total loss, per `order_loss_lambda_side`."""
        lam = float(self.order_loss_weight)
        return (lam, 1.0 - lam) if self.order_loss_lambda_side == "translation" else (1.0 - lam, lam)


# ---------------------------------------------------------------------------------------------------------
# Table 5: Transformer-base and its parameter-matched baselines (plain Marian configs) next to DPE
# ---------------------------------------------------------------------------------------------------------

# Transformer base (Vaswani et al. 2017), the paper's WMT14 setting. vocab_size and the special token ids
# come from your tokenizer: pass them as overrides.
TRANSFORMER_BASE = dict(
    d_model=512,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    encoder_layers=6,
    decoder_layers=6,
    activation_function="relu",
    dropout=0.1,
    scale_embedding=True,
    max_position_embeddings=1024,
    share_encoder_decoder_embeddings=True,
)

TABLE5_PRESETS = {
    "base": ("marian", dict(TRANSFORMER_BASE)),  # baseline, 6 encoder layers
    "8E": ("marian", dict(TRANSFORMER_BASE, encoder_layers=8)),  # + 2 encoder layers = DPE's extra parameters
    "10E": ("marian", dict(TRANSFORMER_BASE, encoder_layers=10)),  # + 4 encoder layers (twice DPE's)
    "DPE": ("dpe", dict(TRANSFORMER_BASE, dpe_layers=2, order_loss_weight=0.5)),  # 6 encoder + 2 DPE layers
}


def table5_preset(name: str, **overrides) -> MarianConfig:
    """Config of a Table 5 model: "base", "8E", "10E" (plain `MarianConfig`) or "DPE" (`DPEMarianConfig`).

    "8E" has exactly as many parameters as "DPE" minus DPE's one gate scalar (a DPE layer is an encoder layer).
    `overrides` (e.g. vocab_size, pad/eos/decoder_start token ids, or smaller dims) replace preset values.
    """
    if name not in TABLE5_PRESETS:
        raise ValueError(f"unknown Table 5 preset {name!r}; known: {sorted(TABLE5_PRESETS)}")
    family, values = TABLE5_PRESETS[name]
    config_class = DPEMarianConfig if family == "dpe" else MarianConfig
    return config_class(**{**values, **overrides})


DPEMarianConfig.register_for_auto_class()  # config.json's auto_map names this file (Hub custom code)
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoConfig.register(DPEMarianConfig.model_type, DPEMarianConfig, exist_ok=True)


__all__ = ["TABLE5_PRESETS", "TRANSFORMER_BASE", "DPEMarianConfig", "table5_preset"]
