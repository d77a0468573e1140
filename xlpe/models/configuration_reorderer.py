"""Configuration of the standalone test-time reorderer (the XL PE paper's preorderer, Sec. 4 / Neubig et al. 2012).

The reorderer predicts, from the source alone, the word order of the source sentence rearranged into target
order (the BTG oracle `xlpe.features.reordering` reads off word alignments). It reads the translation model's
own sub-word ids, so one shipped inside an XL PE checkpoint runs on the pipeline's input with no extra step;
`tokenizer_fingerprint` records which vocabulary it was trained on so that a mismatch is refused.

Imports only transformers: it travels as Hub custom code (flat file).
"""

from __future__ import annotations

from transformers import AutoConfig, PreTrainedConfig

from .config_checks import ValidatedConfigMixin, check_choice, check_number

REORDER_DECODERS = ("btg", "rank")
PAIR_SCORERS = ("biaffine", "mlp")
TRAINING_LOSSES = ("pairwise", "btg_crf", "pairwise+btg_crf")


class XLPEReordererConfig(ValidatedConfigMixin, PreTrainedConfig):
    """Fields (one-line meaning each); the architecture is in modeling_reorderer.py."""

    model_type = "xlpe_reorderer"

    vocab_size: int = 8000  # sub-word vocabulary (the translation model's tokenizer)
    d_model: int = 256  # width of the token and word encoders
    token_layers: int = 3  # Transformer layers over sub-word tokens (contextual encoder)
    word_layers: int = 1  # Transformer layers over word vectors (mean of each word's pieces)
    attention_heads: int = 4  # heads of every layer
    ffn_dim: int = 1024  # feed-forward width of every layer
    dropout: float = 0.1  # dropout in the encoders
    pair_scorer: str = "biaffine"  # f(a, c): "biaffine" q(w_a) . k(w_c); "mlp" v . gelu(U w_a + W w_c)
    pair_dim: int = 128  # width of the pair scorer (biaffine query/key, or the MLP's hidden layer)
    distance_buckets: int = 16  # signed word-distance buckets of the pair scorer's bias (2 * this + 1 biases)
    max_source_positions: int = 512  # longest input in tokens (sinusoid table size)
    max_words: int = 200  # longest input in words the decoder accepts (CKY is O(words^3))
    training_loss: str = "pairwise"  # "pairwise": local BCE per word pair; "btg_crf": NLL of the oracle among all BTG
    #   permutations (what build_reorderer / xlpe-reorder train use from 0.4); or "pairwise+btg_crf". The class default
    #   stays "pairwise" so that a config saved before 0.4 (no such field) reads as what it was trained with
    decoder: str = "btg"  # "btg": exact CKY over BTG trees (btg_chart.py); "rank": sort words by expected rank
    order_prior: float = 0.0  # decoding only: log-odds added in favour of keeping each word pair in source order
    pad_token_id: int | None = None  # padding id of the tokenizer
    eos_token_id: int | None = None  # EOS id (keeps its place, never reordered)
    fixed_token_ids: list[int] | None = None  # other ids that keep their place (language tags, ...)
    tokenizer_fingerprint: str | None = None  # hash of the tokenizer vocabulary it was trained with

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate()

    def validate_family_fields(self):
        """Run at construction, after `from_pretrained` keywords, and by `validate()`."""
        check_choice("decoder", self.decoder, REORDER_DECODERS)
        check_choice("pair_scorer", self.pair_scorer, PAIR_SCORERS)
        check_choice("training_loss", self.training_loss, TRAINING_LOSSES)
        if self.decoder == "rank" and self.training_loss == "btg_crf":
            raise ValueError(
                'decoder="rank" sorts by pair probabilities sigmoid(l), which only a pairwise-trained scorer '
                'gives: use training_loss="pairwise" or "pairwise+btg_crf" with it, or decoder="btg"'
            )
        for name in (
            "vocab_size",
            "d_model",
            "attention_heads",
            "ffn_dim",
            "pair_dim",
            "max_source_positions",
            "max_words",
        ):
            check_number(name, getattr(self, name), 1, integer=True)
        for name in ("token_layers", "word_layers", "distance_buckets"):
            check_number(name, getattr(self, name), 0, integer=True)
        if self.d_model % self.attention_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by attention_heads ({self.attention_heads})")
        check_number("dropout", self.dropout, 0.0, 1.0, high_inclusive=False)
        check_number("order_prior", self.order_prior)


XLPEReordererConfig.register_for_auto_class()  # config.json's auto_map names this file (Hub custom code)
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoConfig.register(XLPEReordererConfig.model_type, XLPEReordererConfig, exist_ok=True)


__all__ = ["XLPEReordererConfig"]
