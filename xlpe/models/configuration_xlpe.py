"""Configuration of the XL PE model family (Ding et al., "Self-Attention with Cross-Lingual Position
Representation"): a `MarianConfig` plus the position-variant fields.

This file is also the `configuration_xlpe.py` that a Hub repository's custom code carries: it imports only
from transformers (no `xlpe` import), so `AutoConfig.from_pretrained(dir, trust_remote_code=True)` works where
the package is not installed.
"""

from __future__ import annotations

from transformers import MarianConfig

XL_STRATEGIES = ("none", "in", "head", "combination")
XL_FUSIONS = ("diagonal", "full")
XL_TRAIN_POSITIONS = ("oracle", "predicted")
REORDER_LOSSES = ("pairwise", "mse")
REORDER_UNITS = ("word", "token")


class XLPEMarianConfig(MarianConfig):
    """MarianConfig with cross-lingual position encoding fields (paper Sec. 3; equations cited per field).

    Every MarianConfig argument is accepted. The XL fields (one-line meaning each):
    """

    model_type = "xlpe_marian"

    # --- where the XL signal enters (Sec. 3.2) ---
    xl_strategy: str = "combination"  # "none" | "in" (Eq. 7-8) | "head" (Eq. 9-11) | "combination" (footnote 2)
    xl_heads: int | None = None  # tau: first-layer heads fed X+PE_XL (Eq. 9-11); None -> H // 4 (paper: 4 of 16)
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
    reorder_predictor_dropout: float = 0.1  # dropout inside the predictor
    reorder_predictor_detach_input: bool = True  # predictor loss does not update the translation embeddings
    reorder_loss: str = "pairwise"  # "pairwise" ranking loss or "mse" on normalised ranks
    reorder_unit: str = "word"  # test time: "word" ranks whole words (mean of their pieces' scores), "token" each piece
    label_smoothing: float = 0.0  # epsilon of the label-smoothed translation loss (papers: 0.1); set by the trainer
    reorder_loss_weight: float = 1.0  # loss = translation_loss + weight * reorder_loss (reported separately)
    reorder_fixed_token_ids: list[int] | None = None  # extra token ids that keep their place (EOS/pad always do)
    reorderer_config: dict | None = None  # a standalone reorderer (configuration_reorderer.py) that predicts instead
    # --- input checking ---
    check_inputs: bool = True  # validate reorder_positions (shape, range, permutation) in forward

    def __post_init__(self, **kwargs):
        if self.xl_strategy not in XL_STRATEGIES:
            raise ValueError(f"xl_strategy must be one of {XL_STRATEGIES}, got {self.xl_strategy!r}")
        if self.xl_fusion not in XL_FUSIONS:
            raise ValueError(f"xl_fusion must be one of {XL_FUSIONS}, got {self.xl_fusion!r}")
        if self.xl_train_positions not in XL_TRAIN_POSITIONS:
            raise ValueError(f"xl_train_positions must be one of {XL_TRAIN_POSITIONS}, got {self.xl_train_positions!r}")
        if self.reorder_unit not in REORDER_UNITS:
            raise ValueError(f"reorder_unit must be one of {REORDER_UNITS}, got {self.reorder_unit!r}")
        if self.reorder_loss not in REORDER_LOSSES:
            raise ValueError(f"reorder_loss must be one of {REORDER_LOSSES}, got {self.reorder_loss!r}")
        heads = self.encoder_attention_heads
        if self.xl_heads is None:
            self.xl_heads = max(1, heads // 4) if self.xl_strategy in ("head", "combination") else 0
        if not isinstance(self.xl_heads, int) or not 0 <= self.xl_heads <= heads:
            raise ValueError(
                f"xl_heads (tau) must be an integer in [0, encoder_attention_heads={heads}], got {self.xl_heads!r}"
            )
        if self.xl_strategy in ("none", "in") and self.xl_heads not in (0, None):
            raise ValueError(
                f"xl_heads={self.xl_heads} only applies to xl_strategy 'head' or 'combination', "
                f"not {self.xl_strategy!r}: set xl_heads=0 or change the strategy"
            )
        if self.reorder_predictor_hidden_size is None:  # d/4 keeps training within ~2% of stock (BENCHMARKS.md)
            heads = self.reorder_predictor_heads
            self.reorder_predictor_hidden_size = -(-max(32, self.d_model // 4) // heads) * heads
        if self.reorder_predictor_layers < 0:
            raise ValueError(f"reorder_predictor_layers must be >= 0, got {self.reorder_predictor_layers}")
        if self.reorder_predictor_hidden_size % self.reorder_predictor_heads != 0:
            raise ValueError(
                f"reorder_predictor_hidden_size ({self.reorder_predictor_hidden_size}) must be divisible by "
                f"reorder_predictor_heads ({self.reorder_predictor_heads})"
            )
        if not (isinstance(self.label_smoothing, (int, float)) and 0.0 <= self.label_smoothing < 1.0):
            raise ValueError(f"label_smoothing must be a number in [0, 1), got {self.label_smoothing!r}")
        if self.reorder_loss_weight < 0:
            raise ValueError(f"reorder_loss_weight must be >= 0, got {self.reorder_loss_weight}")
        if not 0.0 <= self.xl_gate_init <= 1.0:
            raise ValueError(f"xl_gate_init must be in [0, 1], got {self.xl_gate_init}")
        super().__post_init__(**kwargs)


__all__ = ["XLPEMarianConfig"]
