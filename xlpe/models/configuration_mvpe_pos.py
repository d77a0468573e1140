"""Configuration of the mvPE + POS model family (the "augmented Transformer": maximum-variances positional
encoding, Sec. III, and POS tags concatenated to the input, Sec. IV), on BART: a `BartConfig` plus the
mvPE and tag fields, and the Eq. 8 objective that picks the mvPE step k.

This file is also the `configuration_mvpe_pos.py` that a Hub repository's custom code carries: it imports only
torch and transformers (no `xlpe` import).

Eq. 8 as implemented (`mvpe_objective`): f(k) = sum_{1<=i<j<L} ||PE(ik) - PE(jk)||_2, the Euclidean norm of the
difference of two sinusoid vectors (the paper writes |.| and calls it "variance"). With d/2 sin/cos pairs at
frequencies w_m = base^(-2m/d), ||PE(a) - PE(b)||^2 = sum_m 2 - 2 cos((a - b) w_m) depends on a - b only, so
f(k) = sum_{D=1}^{L-2} (L-1-D) * sqrt(d - 2 sum_m cos(D k w_m)), evaluated exactly in float64 for a whole
grid of k at once.

"auto" (`choose_pe_step`, the plateau of Fig. 3): f is evaluated for k = 1, 2, ..., pe_step_search_max; the
plateau level P is the median of f over the upper half of that grid; k is the smallest grid value with
f(k) >= (1 - pe_step_plateau_tolerance) * P. The chosen k is written into `pe_step` as a number, so a saved
config never recomputes it (and a later change of the rule cannot change a trained model).
"""

from __future__ import annotations

import functools
import math

import torch
from transformers import AutoConfig, BartConfig

from .config_checks import ValidatedConfigMixin, check_choice, check_number
from .configuration_source_tags import SourceTagsConfigMixin
from .tag_sets import JIEBA_TAGS, PAD_TAG_ID, PTB_TAGS, SPECIAL_TAG_ID, SPECIAL_TAG_NAMES, UNK_TAG_ID  # noqa: F401

# Tag ids and the tag sets are defined once in tag_sets.py; which tagger has which set, in the tagger registry
# (taggers.py). The source-tag fields (pos_tagger, pos_tags, nltk_data) are SourceTagsConfigMixin's.

POS_TAG_SIDES = ("both", "encoder", "decoder", "none")
POS_TAG_ENCODINGS = ("sinusoid", "learned")
DECODER_TAGS_IN_TRAINING = ("predicted", "gold")


# ---------------------------------------------------------------------------------------------------------
# Eq. 8 and the choice of k
# ---------------------------------------------------------------------------------------------------------


def mvpe_objective(step, max_length: int, dim: int, base: float | None = None):
    """Eq. 8: f(k) = sum_{1<=i<j<L} ||PE(ik) - PE(jk)||_2 with L = `max_length` and a `dim`-wide sinusoid.

    `step` is one k (returns a float) or a sequence / 1-d tensor of k (returns a float64 tensor): plot it
    against k to get Fig. 3. `base` defaults to `max_length` (the paper's Eq. 5-6); 10000 is Vaswani et al.'s.
    """
    scalar = isinstance(step, (int, float))
    steps = torch.as_tensor(step, dtype=torch.float64).reshape(-1)
    length, base = int(max_length), float(max_length if base is None else base)
    if length < 3:
        raise ValueError(f"max_length (L of Eq. 8) must be >= 3, got {max_length}")
    if dim <= 0 or dim % 2:
        raise ValueError(f"dim must be a positive even number (sin/cos pairs), got {dim}")
    if base <= 1.0:
        raise ValueError(f"base must be > 1, got {base}")
    pairs = dim // 2
    freqs = base ** (-2.0 * torch.arange(pairs, dtype=torch.float64) / dim)  # w_m of Eq. 9-10
    diffs = torch.arange(1, length - 1)  # D = j - i for 1 <= i < j <= L-1
    counts = (length - 1 - diffs).to(torch.float64)  # how many pairs (i, j) have that difference
    # sum_m cos(D k w_m) for all D at once: D = a*B + b, cos(x + y) = cos x cos y - sin x sin y -> 2 matmuls
    block = max(1, math.isqrt(length - 1))
    high = torch.arange(-(-(length - 1) // block), dtype=torch.float64) * block  # a*B
    low = torch.arange(block, dtype=torch.float64)  # b
    values = []
    for chunk in steps.split(128):
        phase = chunk[:, None] * freqs[None, :]  # [K, pairs]: k w_m
        outer = high[None, :, None] * phase[:, None, :]  # [K, A, pairs]
        inner = low[None, None, :] * phase[:, :, None]  # [K, pairs, B]
        cos_sum = torch.cos(outer) @ torch.cos(inner) - torch.sin(outer) @ torch.sin(inner)
        cos_sum = cos_sum.reshape(len(chunk), -1)[:, diffs]
        distance = (2.0 * pairs - 2.0 * cos_sum).clamp_min(0.0).sqrt()  # ||PE(ik) - PE(jk)||
        values.append((distance * counts).sum(-1))
    result = torch.cat(values)
    return float(result[0]) if scalar else result


@functools.lru_cache(maxsize=32)
def choose_pe_step(max_length: int, dim: int, base: float, search_max: int = 1000, tolerance: float = 0.01) -> float:
    """The plateau rule of Fig. 3 (module docstring): the smallest k in 1..search_max whose Eq. 8 value is
    within `tolerance` of the plateau level (median of f over the upper half of the grid). Deterministic."""
    if search_max < 2:
        raise ValueError(f"pe_step_search_max must be >= 2, got {search_max}")
    steps = torch.arange(1, search_max + 1, dtype=torch.float64)
    values = mvpe_objective(steps, max_length, dim, base)
    plateau = values[search_max // 2 :].median()
    first = int(torch.nonzero(values >= (1.0 - tolerance) * plateau)[0, 0])
    return float(steps[first])


# ---------------------------------------------------------------------------------------------------------
# The config
# ---------------------------------------------------------------------------------------------------------


class MvPEPosConfig(ValidatedConfigMixin, SourceTagsConfigMixin, BartConfig):
    """BartConfig with mvPE (Eq. 8-10) in place of BART's learned positions and POS tags (Eq. 11).

    Every BartConfig argument is accepted; the source-tag fields `pos_tagger` (here "nltk-en" by default: the
    pipeline's tagger of raw source text, a name of the tagger registry), `pos_tags` (source tag vocabulary, ids
    3.. in order; None -> the pos_tagger's registered set) and `nltk_data` are `SourceTagsConfigMixin`'s.
    Word embeddings are `d_model - pos_dim` wide on a tagged side, so that
    (word embedding + mvPE) concatenated with the `pos_dim`-wide tag encoding is `d_model` wide. The fields:
    """

    model_type = "mvpe_pos"

    # --- a BART default changed: sinusoids are O(1), so embeddings are scaled by sqrt(d_model) (Vaswani, Marian)
    scale_embedding: bool | None = True  # BART's False suits its learned positions, which start as small as words
    # --- mvPE: position p is encoded as the sinusoid of p*k (Eq. 9-10) ---
    pe_step: float | str = "auto"  # k of Eq. 9-10 (k >= 1; 1 = vanilla sinusoid); "auto": Eq. 8 plateau, stored
    pe_base: float | None = None  # sinusoid base; None -> max_position_embeddings (the paper's max_length, Eq. 5-6)
    pe_step_search_max: int = 1000  # "auto": grid k = 1..this (Fig. 3's x-axis)
    pe_step_search_length: int | None = None  # "auto": L of Eq. 8; None -> max_position_embeddings
    pe_step_plateau_tolerance: float = 0.01  # "auto": smallest k with f(k) >= (1 - tol) * plateau level
    # --- POS tags concatenated to (word embedding + mvPE) (Eq. 11) ---
    pos_tag_sides: str = "both"  # inputs that get tags: "both" | "encoder" | "decoder" | "none" (mvPE only)
    pos_dim: int = 64  # d_PoST of Eq. 11: width of the tag encoding (paper: 64)
    pos_tag_encoding: str = "sinusoid"  # "sinusoid": the mvPE function of the tag id (Eq. 11); "learned": ablation
    pos_tagger: str = "nltk-en"  # SourceTagsConfigMixin's field, with mvPE+POS's default (the paper's English tagger)
    decoder_pos_tags: list[str] | None = None  # target tag vocabulary (e.g. jieba's for Chinese); None -> pos_tags
    # --- decoder tags of generated tokens: the hypothesis tagger (modeling_mvpe_pos.HypothesisTagger) ---
    decoder_tagger_window: int = 4  # it tags token t from tokens t-window+1..t of the hypothesis (causal)
    decoder_tagger_hidden_size: int = 256  # its hidden layer
    decoder_tags_in_training: str = "predicted"  # decoder input tags under teacher forcing: "predicted" (what
    #   generation sees) or "gold" (the real tagger's, shifted right; generation still uses the predicted ones)
    tag_loss_weight: float = 1.0  # loss = translation_loss + weight * tag_loss (the tagger's; reported separately)
    label_smoothing: float = 0.0  # epsilon of the label-smoothed translation loss (papers: 0.1); set by the trainer
    # --- input checking ---
    check_inputs: bool = True  # value checks in forward: ids in the vocabulary, right padding, tag ids (range)

    def __post_init__(self, **kwargs):
        # derived defaults; each only when what it is derived from passed its check (reported by the checks below)
        tags = self.decoder_pos_tags
        if tags is not None and list(tags[: len(SPECIAL_TAG_NAMES)]) == list(SPECIAL_TAG_NAMES):
            self.decoder_pos_tags = list(tags[len(SPECIAL_TAG_NAMES) :])  # TagVocabulary.to_list() form
        self.fill_source_tag_defaults()  # pos_tags: the same form; None -> the tagger's registered set, stored
        if self.decoder_pos_tags is None and self.pos_tags is not None:
            self.decoder_pos_tags = list(self.pos_tags)
        if self.pe_base is None:
            self.pe_base = float(self.max_position_embeddings)
        if self.pe_step == "auto" and self._pos_dim_ok() and self._is_number(self.pe_base) and self.pe_base > 1:
            length = self.pe_step_search_length or self.max_position_embeddings
            try:
                self.pe_step = choose_pe_step(
                    int(length),
                    self.word_dim("encoder"),
                    float(self.pe_base),
                    int(self.pe_step_search_max),
                    float(self.pe_step_plateau_tolerance),
                )
            except ValueError as error:
                raise ValueError(f"pe_step='auto' cannot be computed: {error}") from error
        for name in ("pe_base", "pe_step"):
            if self._is_number(getattr(self, name)):
                setattr(self, name, float(getattr(self, name)))
        super().__post_init__(**kwargs)
        self.validate()

    @staticmethod
    def _is_number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def _pos_dim_ok(self) -> bool:
        return self.pos_tag_sides == "none" or (
            isinstance(self.pos_dim, int) and not isinstance(self.pos_dim, bool) and 0 < self.pos_dim < self.d_model
        )

    def validate_family_fields(self):
        """The mvPE and tag fields (run at construction, after `from_pretrained` keywords, and by `validate()`)."""
        check_number("label_smoothing", self.label_smoothing, 0.0, 1.0, high_inclusive=False)
        check_choice("pos_tag_sides", self.pos_tag_sides, POS_TAG_SIDES)
        check_choice("pos_tag_encoding", self.pos_tag_encoding, POS_TAG_ENCODINGS)
        check_choice("decoder_tags_in_training", self.decoder_tags_in_training, DECODER_TAGS_IN_TRAINING)
        if not self._pos_dim_ok():
            raise ValueError(
                f"pos_dim must be an integer in (0, d_model={self.d_model}) (the tag encoding is pos_dim wide, the "
                f"word embedding d_model - pos_dim), got {self.pos_dim!r}"
            )
        if self.pos_tags is None:
            raise ValueError(f"pos_tags must be given for pos_tagger={self.pos_tagger!r} (no built-in tag set)")
        for name in ("pos_tags", "decoder_pos_tags"):
            tags = getattr(self, name)
            if (
                not isinstance(tags, (list, tuple))
                or not tags
                or not all(isinstance(tag, str) and tag for tag in tags)
                or len(set(tags)) != len(tags)
            ):
                raise ValueError(f"{name} must be a non-empty list of distinct tag strings, got {tags!r}")
            if set(tags) & set(SPECIAL_TAG_NAMES):
                raise ValueError(f"{name}: the reserved {SPECIAL_TAG_NAMES} may only come first, in that order")
        check_number("pe_base", self.pe_base, 1.0, low_inclusive=False)
        if self.pe_step == "auto":
            raise ValueError("pe_step='auto' could not be computed: fix the fields reported above or give pe_step")
        check_number("pe_step (k of Eq. 9-10)", self.pe_step, 1.0)
        check_number("decoder_tagger_window", self.decoder_tagger_window, 1, integer=True)
        check_number("decoder_tagger_hidden_size", self.decoder_tagger_hidden_size, 1, integer=True)
        check_number("tag_loss_weight", self.tag_loss_weight, 0.0)

    # --- derived sizes (not stored) ---
    def has_tags(self, side: str) -> bool:
        """Does the `side` ("encoder" / "decoder") input get tags?"""
        return self.pos_tag_sides in ("both", side)

    def uses_extra_input(self, name: str) -> bool:
        """Does this model read the per-token input `name` (extra_inputs.py)? Tags only on a tagged side."""
        sides = {"pos_tag_ids": "encoder", "decoder_pos_tag_ids": "decoder"}
        return name not in sides or self.has_tags(sides[name])

    def word_dim(self, side: str) -> int:
        """Width of word embedding + mvPE on `side`: d_model - pos_dim when tagged, else d_model (Eq. 11)."""
        return self.d_model - self.pos_dim if self.has_tags(side) else self.d_model

    def num_tag_ids(self, side: str) -> int:
        """<pad>, <unk>, <special> and the side's tags."""
        return len(SPECIAL_TAG_NAMES) + len(self.pos_tags if side == "encoder" else self.decoder_pos_tags)


MvPEPosConfig.register_for_auto_class()  # config.json's auto_map names this file (Hub custom code)
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoConfig.register(MvPEPosConfig.model_type, MvPEPosConfig, exist_ok=True)


__all__ = ["JIEBA_TAGS", "PTB_TAGS", "MvPEPosConfig", "choose_pe_step", "mvpe_objective"]
