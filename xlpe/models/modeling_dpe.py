"""DPE: MarianMT with dynamic position encoding (Zheng et al., "Dynamic Position Encoding for Transformers").

Reading order: `DynamicPositionEncoding` (the DPE block of Sec. 3.2, Fig. 4), `order_loss` (Eq. 1), the
encoder that wires them in, then the base model and the generation head (Eq. 2). The decoder is Marian's. The
position options of the XL PE paper's baselines (relative PE, DiSAN-style heads; position_attention.py) apply to
the translation layers of both sides, not to the DPE block.

With X = scaled token embeddings and PE = rows of Marian's sinusoid table (`xlpe/models/sinusoid.py` layout):

* enriched embeddings    Z = dropout(X + PE)                   (Sec. 3.2, "w_i + p_i")
* DPE block              r = DPE(Z): `dpe_layers` post-LN Marian encoder layers of the encoder's width
* encoder input          dropout(X + PE + g * (r - PE))         (g = 1: X + r, r replaces PE as in the reference code)
* order loss (Eq. 1)     mean over supervised tokens i and dims of (r_i - PE[t_i])^2, t_i = `target_positions`[i]
                         (target rank of source token i; -100 = unaligned/special/pad: no loss, as the reference)
* total loss (Eq. 2)     lambda * L_translation + (1 - lambda) * L_order  (`order_loss_lambda_side` flips it to
                         the reference code's (1 - lambda) * L_tr + lambda * L_order; `order_loss_normalization=
                         "reference"` divides L_order by the target token count, the reference's effective weight)

Gate (not in the paper; config.dpe_gate_init): one scalar g. From scratch g = 1, which is exactly the paper's
model at step one (`dpe_learn_gate=False` keeps it there). `from_pretrained` on a stock MarianMT checkpoint sets
g = 0: the encoder input is then bit-for-bit the stock X + PE, so the upgraded model computes exactly the stock
function (tested with `torch.equal`), while the order loss already trains the new block (it reads r, not the
gated mix) and the translation loss moves g off 0. The order loss always supervises the block output r.

The DPE block's layers are `MarianEncoderLayer`s under `encoder.dynamic_position.block`; the encoder's
`hidden_states`/`attentions` outputs cover the `encoder.layers` only (same counts as stock Marian).
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
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_dpe import DPEMarianConfig
from .extra_inputs import IGNORE_INDEX, check_integer_tensor, check_range, token_mask
from .hub_support import HubModelMixin, hf_init
from .position_attention import PositionOptionsMarianDecoder, apply_position_options
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
)
from .source_tags import SourceTagEncoding
from .transformers_compat import renamed_cache_argument

# ---------------------------------------------------------------------------------------------------------
# The DPE block and the order loss
# ---------------------------------------------------------------------------------------------------------


class DynamicPositionEncoding(nn.Module):
    """r = DPE(X + PE) (Sec. 3.2): `dpe_layers` Marian encoder layers; returns r and the gated position signal
    PE + g * (r - PE) that the encoder adds to X in place of PE."""

    def __init__(self, config: DPEMarianConfig):
        super().__init__()
        self.block = nn.ModuleList([MarianEncoderLayer(config) for _ in range(config.dpe_layers)])
        self.gate = nn.Parameter(torch.empty(1), requires_grad=config.dpe_learn_gate)
        self.gate_init = config.dpe_gate_init

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        hf_init.constant_(self.gate, self.gate_init)

    def forward(self, enriched: torch.Tensor, pe_abs: torch.Tensor, attention_mask, **kwargs):
        r = enriched
        for layer in self.block:
            r = layer(r, attention_mask, **kwargs)
        return r, pe_abs + self.gate * (r - pe_abs)


def order_loss(
    dynamic_positions: torch.Tensor, target_positions: torch.Tensor, table: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Eq. 1: L_order = (1/|S|) sum_i MSE(PE[t_i], r_i) over the supervised source tokens of the batch.

    dynamic_positions: r, [batch, len, d]; target_positions: t, [batch, len] (-100 = no supervision);
    table: the sinusoid table PE (the encoder's input PE table); mask: real (non-pad) tokens.
    MSE is a mean over the d dimensions, so the loss is the mean over (supervised tokens x d), as the reference
    code. A batch without any supervised token gives 0 (with a graph), not NaN.
    """
    supervised = mask & (target_positions != IGNORE_INDEX)
    targets = F.embedding(target_positions.masked_fill(~supervised, 0), table).to(torch.float32)
    squared = (dynamic_positions.to(torch.float32) - targets).pow(2).sum(-1)
    count = supervised.sum() * dynamic_positions.shape[-1]
    return (squared * supervised).sum() / count.clamp(min=1)


# ---------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------


@dataclass
class DPEEncoderOutput(BaseModelOutput):
    """`dynamic_positions`: r, the DPE block's output; `order_loss`: Eq. 1, only when asked for (training)."""

    dynamic_positions: torch.FloatTensor | None = None
    order_loss: torch.FloatTensor | None = None


@dataclass
class DPESeq2SeqModelOutput(Seq2SeqModelOutput):
    dynamic_positions: torch.FloatTensor | None = None
    order_loss: torch.FloatTensor | None = None


@dataclass
class DPESeq2SeqLMOutput(Seq2SeqLMOutput):
    """`loss` = Eq. 2 (weights per config) when `target_positions` are given, else `translation_loss`."""

    translation_loss: torch.FloatTensor | None = None
    guided_alignment_loss: torch.FloatTensor | None = None  # guided_alignment.py, when its weight is > 0
    order_loss: torch.FloatTensor | None = None
    dynamic_positions: torch.FloatTensor | None = None


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


class DPEMarianPreTrainedModel(HubModelMixin, MarianPreTrainedModel):
    """The one pre-trained base of this family (encoder, base model, generation model): Marian's, plus the Hub and
    initialisation behaviour of every family (hub_support.HubModelMixin). `from_pretrained(stock_marian_dir)`
    upgrades a MarianMT checkpoint function-preservingly (gate g = 0, see module doc)."""

    config_class = DPEMarianConfig
    config: DPEMarianConfig
    _no_split_modules = ["MarianEncoderLayer", "MarianDecoderLayer"]
    stock_model_types = ("marian",)
    upgrade_overrides = {"dpe_gate_init": 0.0, "zero_init_added_tables": True}


class DPEMarianEncoder(DPEMarianPreTrainedModel):
    """Marian's encoder (same submodule names, so stock weights load) with the DPE block before its layers."""

    # only the translation encoder's layers (`.layers.`), not the DPE block's (`.dynamic_position.block.`)
    _can_record_outputs = {
        "hidden_states": OutputRecorder(MarianEncoderLayer, index=0, layer_name="layers"),
        "attentions": OutputRecorder(MarianAttention, index=1, layer_name="layers"),
    }

    def __init__(self, config: DPEMarianConfig):
        super().__init__(config)
        init_marian_encoder_parts(self, config)
        apply_position_options(self, config, is_decoder=False)  # the translation layers; the DPE block stays plain
        self.source_tags = SourceTagEncoding(config, self.embed_scale) if config.pos_tagger else None  # DPE + POS
        self.dynamic_position = DynamicPositionEncoding(config)
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        target_positions: torch.LongTensor | None = None,
        compute_order_loss: bool = False,
        pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> DPEEncoderOutput:
        r"""
        target_positions (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Target rank of each source token (Eq. 1 supervision; -100 = none), as prepared by
            `xlpe.features.reordering.dpe_target_positions`.
            Only read for the order loss; DPE itself runs from the source alone.
        compute_order_loss (`bool`): return the order loss (Eq. 1) against `target_positions`.
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token, for a model with `config.pos_tagger` (DPE + POS, source_tags.py).
        """
        inputs_embeds = embed_source(self, input_ids, inputs_embeds, attention_mask)
        batch, length = inputs_embeds.shape[:2]
        mask = token_mask(attention_mask, (batch, length), inputs_embeds.device)
        if self.source_tags is not None:  # X = E[w] * scale + T[tag] * scale
            inputs_embeds = self.source_tags(inputs_embeds, pos_tag_ids, mask)
        if target_positions is not None and self.config.check_inputs:
            check_integer_tensor("target_positions", target_positions, (batch, length))
            check_range("target_positions", target_positions, mask, 0, length, allowed=IGNORE_INDEX)
        pe_abs = self.embed_positions(inputs_embeds.shape[:-1])
        enriched = F.dropout(inputs_embeds + pe_abs, p=self.dropout, training=self.training)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        r, position_signal = self.dynamic_position(enriched, pe_abs, attention_mask, **kwargs)
        loss = None
        if compute_order_loss and target_positions is not None:
            loss = order_loss(r, target_positions.long(), self.embed_positions.weight, mask)
        hidden_states = inputs_embeds + position_signal.to(inputs_embeds.dtype)  # g = 1: X + r (Fig. 4)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        hidden_states = run_encoder_layers(self, hidden_states, attention_mask, **kwargs)
        return DPEEncoderOutput(last_hidden_state=hidden_states, dynamic_positions=r, order_loss=loss)


@marian_model_behaviour  # what it keeps of the stock class (seq2seq_scaffold.stock_behaviour)
class DPEMarianModel(DPEMarianPreTrainedModel):
    """Marian encoder-decoder whose encoder runs the DPE block; `forward` takes `target_positions`."""

    def __init__(self, config: DPEMarianConfig):
        super().__init__(config)
        init_marian_body(self, config, DPEMarianEncoder(config), PositionOptionsMarianDecoder(config))
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
        target_positions: torch.LongTensor | None = None,
        compute_order_loss: bool | None = None,
        pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> DPESeq2SeqModelOutput:
        r"""
        target_positions (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            Target rank of each source token (-100 = none); when given, the order loss (Eq. 1) is returned.
        compute_order_loss (`bool`, *optional*): defaults to `target_positions is not None`.
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token, for a model with `config.pos_tagger` (DPE + POS, source_tags.py).
        """
        if compute_order_loss is None:
            compute_order_loss = target_positions is not None
        return encode_decode(
            self,
            DPESeq2SeqModelOutput,
            DPEEncoderOutput,
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
                "target_positions": target_positions,
                "compute_order_loss": compute_order_loss,
                "pos_tag_ids": pos_tag_ids,
            },
            **kwargs,
        )


@marian_mt_model_behaviour  # what it keeps of the stock class (seq2seq_scaffold.stock_behaviour)
class DPEMarianMTModel(DPEMarianPreTrainedModel, GenerationMixin):
    """DPE translation model. Training: `model(**batch)` with `labels` and `target_positions` returns Eq. 2.
    Inference: `generate(**batch)` (DPE needs the source only). `from_pretrained(stock_marian_dir)` upgrades a
    MarianMT checkpoint function-preservingly (gate g = 0, see module doc)."""

    accepts_loss_kwargs = True  # loss weighted by `num_items_in_batch` (seq2seq_scaffold.weight_by_global_tokens)

    def __init__(self, config: DPEMarianConfig):
        super().__init__(config)
        init_marian_head(self, config, DPEMarianModel(config))
        self.post_init()

    def add_auxiliary_losses(self, token_loss, outputs, labels):
        """Eq. 2 when the order loss was computed (`target_positions` given), else `token_loss` alone."""
        if outputs.order_loss is not None:
            return self.combine_losses(token_loss, outputs.order_loss, labels)
        return token_loss

    def combine_losses(self, translation_loss: torch.Tensor, order_loss: torch.Tensor, labels: torch.Tensor):
        """Eq. 2 with the configured lambda side; `order_loss_normalization="reference"` divides L_order by the
        number of target tokens (the reference's summed CE / mean MSE, both divided by that count)."""
        translation_weight, order_weight = self.config.loss_weights()
        if self.config.order_loss_normalization == "reference":
            order_loss = order_loss / (labels != IGNORE_INDEX).sum().clamp(min=1)
        return translation_weight * translation_loss + order_weight * order_loss

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
        target_positions: torch.LongTensor | None = None,
        pos_tag_ids: torch.LongTensor | None = None,
        alignment_links: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> DPESeq2SeqLMOutput:
        r"""
        target_positions (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            Target rank of each source token (-100 = none; `xlpe.features.reordering.dpe_target_positions`).
            Given together with `labels`: the order loss (Eq. 1) is computed and `loss` is Eq. 2. Without: `loss`
            is the translation loss alone. Never needed at inference.
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token, for a model with `config.pos_tagger` (DPE + POS, source_tags.py).
        alignment_links (`torch.LongTensor` of shape `(batch_size, 2 * links)`, *optional*):
            Word-alignment links in sub-word tokens, flat (target, source) pairs, -100 = padding: with `labels` and
            `config.guided_alignment_weight > 0`, `loss` adds the guided alignment cost (guided_alignment.py).
        """
        return generation_head_forward(
            self,
            DPESeq2SeqLMOutput,
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
            target_positions=target_positions,
            compute_order_loss=labels is not None and target_positions is not None,
            pos_tag_ids=pos_tag_ids,
            auxiliary_losses=self.add_auxiliary_losses,
            alignment_links=alignment_links,
            **kwargs,
        )


# with the Auto classes and for Hub custom code (save_pretrained writes auto_map and copies the code files)
DPEMarianModel.register_for_auto_class("AutoModel")
DPEMarianMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoModel.register(DPEMarianConfig, DPEMarianModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(DPEMarianConfig, DPEMarianMTModel, exist_ok=True)


__all__ = ["DPEMarianMTModel", "DPEMarianModel", "DPEMarianPreTrainedModel", "DynamicPositionEncoding", "order_loss"]
