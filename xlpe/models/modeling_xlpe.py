"""XL PE: MarianMT with cross-lingual position representations (Ding et al., 2020, Sec. 3).

Reading order: `CrossLingualPositionEncoding` (Eq. 6-8), `XLHeadAttention` (Eq. 9-11), the encoder that
wires them in, then the base model and the generation head. The decoder is Marian's (Sec. 4); the position
options of the paper's baselines (relative PE, DiSAN-style heads, no absolute PE; position_attention.py) apply
to both sides and stack with every strategy.

Strategies (config.xl_strategy), with X = scaled token embeddings, PE_abs/PE_XL rows of one sinusoid table:

* "in"          Z = X + PE_In-XL,  PE_In-XL = tanh(PE_abs U + PE_XL V)                       (Eq. 7-8)
* "head"        layer 1 self-attention: heads 1..tau get Q/K/V from X + PE_XL, the others from X + PE_abs
                (Eq. 9-11). The residual path of layer 1 carries Z_abs = X + PE_abs, so tau = 0 is vanilla.
* "combination" as "head" with PE_In-XL in place of PE_XL in Eq. 9 (footnote 2); residual carries Z_abs.
* "none"        vanilla Marian (a baseline with the same code path).

The model reads a strategy's traits (strategies.py: INPUT_FUSION, PE_In-XL of Eq. 7; XL_HEADS, the tau heads of
Eq. 9-11), never its name, so a new strategy made of these traits is one row there and no code here.

Gate (not in the paper; config.xl_gate_init): the XL side is PE_abs + g * (PE_target - PE_abs) with one
scalar g. g = 1 is exactly the paper; training from scratch starts there ("the XL signal from the first step").
`from_pretrained` on a stock MarianMT checkpoint starts at g = 0, which makes the new model compute exactly
the stock function until fine-tuning moves g (the upgrade path; tanh cannot reproduce PE_abs, so Eq. 7 alone
could not be function-preserving).

HeadXL is computed in one pass of the stock projection's size: the tau heads' rows of W_Q, W_K, W_V project
Z_XL = X + PE_xl_side, the other rows Z_abs (two matmuls that together do the work of the stock Q/K/V projection;
Z_XL under the same dropout mask as Z_abs). Attention itself goes through `ALL_ATTENTION_FUNCTIONS`, so eager,
sdpa and flash paths all work (eager and sdpa with relative PE or directional heads, which need an attention bias).
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForSeq2SeqLM, GenerationMixin
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.models.marian.modeling_marian import (
    MarianAttention,
    MarianEncoderLayer,
    MarianPreTrainedModel,
    MarianSinusoidalPositionalEmbedding,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_reorderer import XLPEReordererConfig
from .configuration_xlpe import XLPEMarianConfig
from .extra_inputs import check_integer_tensor, check_permutation, token_mask
from .hub_support import HubModelMixin, hf_init
from .modeling_reorderer import XLPEReordererModel
from .position_attention import PositionAwareSelfAttention, PositionOptionsMarianDecoder, apply_position_options
from .reorder_predictor import (
    ReorderPredictor,
    WordStarts,
    keep_mask,
    positions_from_scores,
    reorder_loss,
    word_mean_scores,
)
from .seq2seq_scaffold import (
    embed_source,
    encode_decode,
    generation_head_forward,
    init_marian_body,
    init_marian_encoder_parts,
    init_marian_head,
    marian_model_behaviour,
    marian_mt_model_behaviour,
    run_encoder_layers,
    touch_parameters,
)
from .source_tags import SourceTagEncoding
from .strategies import INPUT_FUSION, XL_HEADS
from .transformers_compat import renamed_cache_argument
from .xl_position_forms import xl_position_form

# ---------------------------------------------------------------------------------------------------------
# Position modules
# ---------------------------------------------------------------------------------------------------------


class CrossLingualPositionEncoding(nn.Module):
    """PE of the XL side: PE_XL (Eq. 6) for "head", PE_In-XL = tanh(PE_abs U + PE_XL V) (Eq. 7) otherwise.

    `xl_fusion="diagonal"`: U and V are d-vectors (element-wise products), 2d parameters: +0.002M for
    Transformer-big, the order of the paper's "+0.01M". `"full"`: d x d matrices, 2d^2 parameters (+2.1M for
    Transformer-big), which the paper's count rules out but which is the literal reading of Eq. 7.
    """

    def __init__(self, config: XLPEMarianConfig):
        super().__init__()
        self.strategy, self.fusion, self.init_scale = config.xl_strategy, config.xl_fusion, config.xl_fusion_init_scale
        self.fuses = INPUT_FUSION in config.xl_traits  # PE_In-XL (Eq. 7); else PE_XL itself (HeadXL)
        self.gate_init = config.xl_gate_init
        d = config.d_model
        if self.fuses:
            shape = (d,) if self.fusion == "diagonal" else (d, d)
            self.fusion_abs = nn.Parameter(torch.empty(shape))  # U of Eq. 7
            self.fusion_xl = nn.Parameter(torch.empty(shape))  # V of Eq. 7
        self.gate = nn.Parameter(torch.empty(1))

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        if self.fuses:
            for weight in (self.fusion_abs, self.fusion_xl):
                if self.fusion == "diagonal":
                    hf_init.constant_(weight, self.init_scale)
                else:
                    hf_init.copy_(weight, self.init_scale * torch.eye(weight.shape[0], device=weight.device))
        hf_init.constant_(self.gate, self.gate_init)

    def forward(self, pe_abs: torch.Tensor, pe_xl: torch.Tensor) -> torch.Tensor:
        if not self.fuses:
            target = pe_xl
        elif self.fusion == "diagonal":
            target = torch.tanh(pe_abs * self.fusion_abs + pe_xl * self.fusion_xl)
        else:
            target = torch.tanh(pe_abs @ self.fusion_abs + pe_xl @ self.fusion_xl)
        return pe_abs + self.gate * (target - pe_abs)


class XLHeadAttention(PositionAwareSelfAttention):
    """Encoder self-attention of layer 1 whose first `xl_heads` heads see X + PE_xl_side (Eq. 9-11).

    Same parameters (names and shapes) as `MarianAttention`, so stock weights load into it; relative position
    representations and directional heads (position_attention.py) apply to it as to any encoder layer.
    """

    def __init__(self, config: XLPEMarianConfig):
        relative = config.relative_attention_max_distance > 0 and config.relative_attention_sides in ("encoder", "both")
        super().__init__(
            config,
            config.encoder_attention_heads,
            layer_idx=0,
            relative=relative,
            directional=config.directional_attention,
            alibi=config.alibi_attention and config.alibi_attention_sides in ("encoder", "both"),
        )
        self.xl_heads = config.xl_heads

    def project(self, hidden_states, xl_hidden_states=None):
        """(B, H, L, d_h) query, key and value: heads 1..tau from `xl_hidden_states` (Z_XL, Eq. 9-10), the others
        from `hidden_states` (Z_abs, Eq. 11). Each side is one matmul over the three projections' rows it needs,
        so the step does the stock projection's work (no Z_XL W over every column, no correction added after)."""
        if xl_hidden_states is None or self.xl_heads == 0:
            return super().project(hidden_states)
        rows = self.xl_heads * self.head_dim
        linears = (self.q_proj, self.k_proj, self.v_proj)
        split = (*hidden_states.shape[:-1], 3, -1, self.head_dim)  # [..., Q/K/V, heads, d_h]
        heads = F.linear(xl_hidden_states.to(hidden_states.dtype), *stacked_rows(linears, slice(0, rows))).view(split)
        if rows < self.q_proj.out_features:
            from_abs = F.linear(hidden_states, *stacked_rows(linears, slice(rows, None))).view(split)
            heads = torch.cat([heads, from_abs], dim=-2)
        return heads.permute(2, 0, 3, 1, 4).unbind(0)  # [B, L, 3, H, d_h] -> 3 x [B, H, L, d_h]


def stacked_rows(linears, rows: slice) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias rows `rows` of each linear, stacked in order: one F.linear computes all their outputs."""
    weight = torch.cat([linear.weight[rows] for linear in linears])
    biases = [linear.bias for linear in linears]
    return weight, (None if any(b is None for b in biases) else torch.cat([b[rows] for b in biases]))


class FixedTokens(nn.Module):
    """The token ids that keep their place in every reordering (EOS, pad, `config.reorder_fixed_token_ids`), as a
    non-persistent long buffer: made once in `__init__` and moved by `.to(device)` (never cast by `.to(dtype)`,
    it is an integer tensor), so the forward neither builds a tensor from a Python list (a blocking host-to-device
    copy on an accelerator) nor writes state, which under torch.compile would fail a guard and recompile. Not in
    the state dict (checkpoints are unchanged); refilled by `init_own_parameters`, which `_init_weights` calls at
    `post_init` and for `from_pretrained`'s meta-device loading (seq2seq_scaffold.InitOwnParametersMixin)."""

    def __init__(self, config: XLPEMarianConfig):
        super().__init__()
        fixed = {config.eos_token_id, config.pad_token_id, *(config.reorder_fixed_token_ids or [])}
        self.token_ids = sorted(i for i in fixed if isinstance(i, int))
        self.register_buffer("ids", torch.tensor(self.token_ids, dtype=torch.long), persistent=False)

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.copy_(self.ids, torch.tensor(self.token_ids, dtype=torch.long, device=self.ids.device))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Bool tensor shaped like `input_ids`: True where the token is a fixed one."""
        return torch.isin(input_ids, self.ids)


# ---------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------


@dataclass
class XLPEEncoderOutput(BaseModelOutput):
    """`reorder_positions`: the XL positions the encoder used (given or predicted); `reorder_loss`: the
    predictor's imitation loss, only when asked for (training)."""

    reorder_positions: torch.LongTensor | None = None
    reorder_loss: torch.FloatTensor | None = None


@dataclass
class XLPESeq2SeqModelOutput(Seq2SeqModelOutput):
    reorder_positions: torch.LongTensor | None = None
    reorder_loss: torch.FloatTensor | None = None


@dataclass
class XLPESeq2SeqLMOutput(Seq2SeqLMOutput):
    """`loss` = `translation_loss` + reorder_loss_weight * `reorder_loss`; both parts reported."""

    translation_loss: torch.FloatTensor | None = None
    guided_alignment_loss: torch.FloatTensor | None = None  # guided_alignment.py, when its weight is > 0
    reorder_loss: torch.FloatTensor | None = None
    reorder_positions: torch.LongTensor | None = None


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


class XLPEMarianPreTrainedModel(HubModelMixin, MarianPreTrainedModel):
    """The one pre-trained base of this family (encoder, base model, generation model): Marian's, plus the Hub and
    initialisation behaviour of every family (hub_support.HubModelMixin) and `attach_reorderer`.
    `from_pretrained(stock_marian_dir)` upgrades a MarianMT checkpoint (see module doc)."""

    config_class = XLPEMarianConfig
    config: XLPEMarianConfig
    _no_split_modules = ["MarianEncoderLayer", "MarianDecoderLayer"]
    stock_model_types = ("marian",)
    upgrade_overrides = {"xl_gate_init": 0.0, "zero_init_added_tables": True}
    weights_never_initialised = ("reorderer",)  # an attached reorderer missing from the weights: refused at load

    def attach_reorderer(self, reorderer: XLPEReordererModel | None) -> None:
        """Make a standalone reorderer (modeling_reorderer.py) the source of predicted positions (`None` detaches
        it). It is saved inside this checkpoint (weights under `model.encoder.reorderer.`, its config in
        `config.reorderer_config`), so `from_pretrained` and the translation pipeline use it with no extra step.
        It predicts without gradients and in eval mode, so training the translation model never changes it."""
        encoder = self.get_encoder()
        if not encoder.uses_xl:
            raise ValueError(
                f"xl_strategy={self.config.xl_strategy!r} with xl_heads={self.config.xl_heads} uses no XL "
                "positions: there is nothing for a reorderer to predict"
            )
        if reorderer is None:
            encoder.reorderer, self.config.reorderer_config = None, None
            return
        for name in ("pad_token_id", "eos_token_id"):
            if getattr(reorderer.config, name) != getattr(self.config, name):
                raise ValueError(
                    f"reorderer {name} is {getattr(reorderer.config, name)} but the model's is "
                    f"{getattr(self.config, name)}: it was trained with another tokenizer"
                )
        fixed = sorted(set(encoder.fixed_token_ids) | set(reorderer.fixed_token_ids))
        reorderer.config.fixed_token_ids = fixed  # the model's fixed tokens never move, whoever predicts
        reorderer.fixed_token_ids = fixed
        reorderer.init_own_parameters()
        config = reorderer.config.to_dict()
        config.pop("transformers_version", None)
        self.config.reorderer_config = config
        parameter = next(self.parameters())
        encoder.reorderer = reorderer.to(device=parameter.device).eval().requires_grad_(False)


class XLPEMarianEncoder(XLPEMarianPreTrainedModel):
    """Marian's encoder (same submodule names, so stock weights load) with XL positions at its input."""

    _can_record_outputs = {"hidden_states": MarianEncoderLayer, "attentions": MarianAttention}

    def __init__(self, config: XLPEMarianConfig):
        super().__init__(config)
        init_marian_encoder_parts(self, config)
        self.uses_xl = config.uses_xl  # computed once, by the config (its strategy's traits and xl_heads)
        self.xl_form = config.xl_position_form if self.uses_xl else "absolute"
        # a form in the attention (relative, rotary: xl_position_forms.py) or the XL heads' input (absolute, Eq. 9)
        self.xl_form_in_attention = xl_position_form(self.xl_form).in_attention
        self.xl_in_input = INPUT_FUSION in config.xl_traits and XL_HEADS not in config.xl_traits  # InXL alone: Z
        if XL_HEADS in config.xl_traits and config.xl_heads > 0 and not self.xl_form_in_attention:
            self.layers[0].self_attn = XLHeadAttention(config)
        # XL heads whose form lives in the attention (position_attention.py): layer 1's, or every layer's
        self.xl_layers = (
            (tuple(range(config.encoder_layers)) if config.xl_position_layers == "all" else (0,))
            if self.xl_form_in_attention
            else ()
        )
        apply_position_options(
            self, config, is_decoder=False, xl_heads=config.xl_heads, xl_form=self.xl_form, xl_layers=self.xl_layers
        )  # Table 1 baselines, Table 4, XL relative/rotary heads
        self.source_tags = SourceTagEncoding(config, self.embed_scale) if config.pos_tagger else None  # XL PE + POS
        if self.uses_xl:
            self.xl_position = CrossLingualPositionEncoding(config)
            self.reorder_predictor = ReorderPredictor.from_config(config)
            self.word_starts = WordStarts(config.vocab_size)
            # without absolute PE (relative/rotary XL forms) the predictor still needs to know where tokens are
            self.predictor_positions = (
                None
                if config.absolute_positions
                else MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
            )
        # a standalone reorderer (attach_reorderer) predicts the positions instead of the built-in predictor
        self.reorderer = (
            XLPEReordererModel(XLPEReordererConfig.from_dict(config.reorderer_config))
            if (self.uses_xl and config.reorderer_config)
            else None
        )
        self.fixed_tokens = FixedTokens(config)
        self.post_init()

    @property
    def fixed_token_ids(self) -> list[int]:
        return self.fixed_tokens.token_ids

    def movable_tokens(self, input_ids: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """Real tokens that take part in reordering (special tokens keep their place)."""
        if input_ids is None:
            return mask
        return mask & ~self.fixed_tokens(input_ids)

    @torch.compiler.disable  # CKY loops over span lengths: runs eagerly, once per source batch
    def reorderer_positions(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """XL positions from the attached standalone reorderer (its fixed tokens are this model's). It always
        predicts in eval mode (no dropout), also while the translation model trains."""
        if self.reorderer.training:
            self.reorderer.eval()
        return self.reorderer.predict_positions(input_ids, mask.long())

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        reorder_positions: torch.LongTensor | None = None,
        compute_reorder_loss: bool = False,
        pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> XLPEEncoderOutput:
        r"""
        reorder_positions (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            XL position of each source token (paper Fig. 1b): on non-pad tokens, a permutation of their indices.
            When omitted, the reorder predictor supplies them.
        compute_reorder_loss (`bool`): return the predictor's imitation loss against `reorder_positions`.
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            POS tag id of each source token, for a model with `config.pos_tagger` (source_tags.py); ignored otherwise.
        """
        inputs_embeds = embed_source(self, input_ids, inputs_embeds, attention_mask)
        batch, length = inputs_embeds.shape[:2]
        mask = token_mask(attention_mask, (batch, length), inputs_embeds.device)
        if self.source_tags is not None:  # X = E[w] * scale + T[tag] * scale
            inputs_embeds = self.source_tags(inputs_embeds, pos_tag_ids, mask)
        pe_abs = self.embed_positions(inputs_embeds.shape[:-1])
        hidden_states = inputs_embeds + pe_abs
        xl_hidden_states = used_positions = loss = None
        if reorder_positions is not None and self.config.check_inputs:  # checked even where the strategy ignores them
            check_integer_tensor("reorder_positions", reorder_positions, (batch, length))
            check_permutation("reorder_positions", reorder_positions, mask)
        if self.uses_xl:
            movable = self.movable_tokens(input_ids, mask)
            predict = reorder_positions is None or (self.training and self.config.xl_train_positions == "predicted")
            external = predict and self.reorderer is not None and input_ids is not None
            scores = None
            if (predict and not external) or compute_reorder_loss:
                predictor_input = (
                    hidden_states
                    if self.predictor_positions is None
                    else inputs_embeds + self.predictor_positions(inputs_embeds.shape[:-1])
                )
                predictor_input = (
                    predictor_input.detach() if self.config.reorder_predictor_detach_input else predictor_input
                )
                scores = self.reorder_predictor(predictor_input, mask)
            if compute_reorder_loss and reorder_positions is not None:
                loss = reorder_loss(scores, reorder_positions, movable, self.config.reorder_loss)
            if external:
                used_positions = self.reorderer_positions(input_ids, mask)
            elif predict:
                if self.config.reorder_unit == "word" and input_ids is not None:
                    scores = word_mean_scores(scores, self.word_starts(input_ids), movable)
                used_positions = positions_from_scores(scores, movable)
            else:
                used_positions = reorder_positions.long()
            index = torch.arange(length, device=inputs_embeds.device)
            used_positions = torch.where(mask, used_positions, index)  # pad slots: any value was allowed
        if self.uses_xl and self.xl_form_in_attention:  # the XL heads' distances / angles: no PE_XL
            xl_layer_kwargs = {"xl_positions": used_positions, "xl_gate": self.xl_position.gate}
        elif self.uses_xl:
            pe_xl = F.embedding(used_positions, self.embed_positions.weight)
            pe_xl_side = self.xl_position(pe_abs, pe_xl).to(inputs_embeds.dtype)
            if self.xl_in_input:
                hidden_states = inputs_embeds + pe_xl_side
            else:
                xl_hidden_states = inputs_embeds + pe_xl_side  # Z_XL of the tau heads (Eq. 9)
        if self.training and self.dropout > 0:  # one dropout mask for Z_abs and for the XL heads' Z_XL
            keep = keep_mask(hidden_states, self.dropout)  # (cheaper on CPU: reorder_predictor.keep_mask)
            hidden_states = hidden_states * keep
            xl_hidden_states = xl_hidden_states * keep if xl_hidden_states is not None else None
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        layer_kwargs = {index: xl_layer_kwargs for index in self.xl_layers} if self.xl_layers else {}
        if xl_hidden_states is not None:
            layer_kwargs = {0: {"xl_hidden_states": xl_hidden_states}}
        hidden_states = run_encoder_layers(self, hidden_states, attention_mask, layer_kwargs, **kwargs)
        return XLPEEncoderOutput(last_hidden_state=hidden_states, reorder_positions=used_positions, reorder_loss=loss)


@marian_model_behaviour  # what it keeps of the stock class (seq2seq_scaffold.stock_behaviour)
class XLPEMarianModel(XLPEMarianPreTrainedModel):
    """Marian encoder-decoder whose encoder carries XL positions; `forward` takes `reorder_positions`."""

    def __init__(self, config: XLPEMarianConfig):
        super().__init__(config)
        init_marian_body(self, config, XLPEMarianEncoder(config), PositionOptionsMarianDecoder(config))
        self.post_init()

    @can_return_tuple
    @renamed_cache_argument
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        past_key_values=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        reorder_positions: torch.LongTensor | None = None,
        compute_reorder_loss: bool = False,
        pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> XLPESeq2SeqModelOutput:
        r"""
        reorder_positions (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            XL position of each source token; predicted from the source when omitted.
        compute_reorder_loss (`bool`): also return the reorder predictor's loss against `reorder_positions`.
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token (a model with `config.pos_tagger`).
        """
        return encode_decode(
            self,
            XLPESeq2SeqModelOutput,
            XLPEEncoderOutput,
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            encoder_kwargs={
                "reorder_positions": reorder_positions,
                "compute_reorder_loss": compute_reorder_loss,
                "pos_tag_ids": pos_tag_ids,
            },
            **kwargs,
        )


@marian_mt_model_behaviour  # what it keeps of the stock class (seq2seq_scaffold.stock_behaviour)
class XLPEMarianMTModel(XLPEMarianPreTrainedModel, GenerationMixin):
    """XL PE translation model. `generate(**batch)` predicts reorderings; `generate(..., reorder_positions=p)`
    uses the given ones. `from_pretrained(stock_marian_dir)` upgrades a MarianMT checkpoint (see module doc)."""

    accepts_loss_kwargs = True  # loss weighted by `num_items_in_batch` (seq2seq_scaffold.weight_by_global_tokens)

    def __init__(self, config: XLPEMarianConfig):
        super().__init__(config)
        init_marian_head(self, config, XLPEMarianModel(config))
        self.post_init()

    def add_auxiliary_losses(self, token_loss, outputs, labels):
        """`token_loss` + reorder_loss_weight * the predictor's loss; without its supervision, a zero-weighted
        term over the predictor's parameters, so that DDP sees them used."""
        if outputs.reorder_loss is not None:
            return token_loss + self.config.reorder_loss_weight * outputs.reorder_loss
        return token_loss + touch_parameters(getattr(self.model.encoder, "reorder_predictor", None))

    @can_return_tuple
    @renamed_cache_argument
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        past_key_values=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        reorder_positions: torch.LongTensor | None = None,
        pos_tag_ids: torch.LongTensor | None = None,
        alignment_links: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> XLPESeq2SeqLMOutput:
        r"""
        reorder_positions (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            XL position of each source token (oracle BTG order in training, see `xlpe.features.reordering`). Omitted:
            predicted from the source. Given together with `labels`: also trains the reorder predictor (without
            them, `loss` carries a zero-weighted term over the predictor's parameters, so that DDP sees them used).
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token, for a model with `config.pos_tagger` (XL PE + POS, source_tags.py):
            0 pad, 1 unknown, 2 special, 3.. `config.pos_tags`. The translation pipeline tags raw text itself.
        alignment_links (`torch.LongTensor` of shape `(batch_size, 2 * links)`, *optional*):
            Word-alignment links in sub-word tokens, flat (target, source) pairs, -100 = padding: with `labels` and
            `config.guided_alignment_weight > 0`, `loss` adds the guided alignment cost (guided_alignment.py).
        """
        return generation_head_forward(
            self,
            XLPESeq2SeqLMOutput,
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            reorder_positions=reorder_positions,
            compute_reorder_loss=labels is not None and reorder_positions is not None,
            pos_tag_ids=pos_tag_ids,
            auxiliary_losses=self.add_auxiliary_losses,
            alignment_links=alignment_links,
            **kwargs,
        )


# with the Auto classes and for Hub custom code (save_pretrained writes auto_map and copies the code files)
XLPEMarianModel.register_for_auto_class("AutoModel")
XLPEMarianMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoModel.register(XLPEMarianConfig, XLPEMarianModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(XLPEMarianConfig, XLPEMarianMTModel, exist_ok=True)


__all__ = ["XLPEMarianModel", "XLPEMarianMTModel", "XLPEMarianPreTrainedModel"]
