"""mvPE + POS: BART with maximum-variances positions and POS tags concatenated to its inputs (the "augmented
Transformer" of Sec. III-IV).

Reading order: the input of one side (`TagEncoding`, Eq. 11), the decoder's `HypothesisTagger` (how generated
tokens get their tags), the encoder and decoder that wire them in, then the base model and the generation head.

Input of each side (Eq. 11), with d_w = d_model - pos_dim on a tagged side, d_model otherwise:

    x_t = LayerNorm( [ E[w_t] * scale + mvPE(t) ;  TagPE(tag_t) ] )          (d_w + pos_dim = d_model)

* mvPE(t) = PE(t * k) (Eq. 9-10): the sinusoid of `xlpe/models/sinusoid.py` with base `pe_base` (the paper's
  max_length, Eq. 5-6) at position t*k; k = `pe_step`, 1 = vanilla sinusoid. It replaces BART's learned
  positions on both sides. Layout: Marian's (sines then cosines, not interleaved); a fixed permutation of the
  features of Eq. 9-10, immaterial to a model that learns its weights.
* TagPE(tag) = PE(tag * k), pos_dim wide, same function and base ("sinusoid", Eq. 11), or a learned
  embedding ("learned", the ablation). The concatenation replaces the sum of the vanilla Transformer.
* LayerNorm: BART's `layernorm_embedding`, kept (the paper's OpenNMT model has none; BART's layers expect it).
* Output projection: the decoder output is d_model wide, the (tied) word embeddings d_w wide. With
  `tie_word_embeddings=True` (BART's default) logits = E @ (W_out h) with a d_model -> d_w `output_projection`
  (no bias), so the lm_head stays tied to the input embeddings; with False, an untied d_model-wide lm_head and
  no projection (under transformers 5 that also unties encoder/decoder embeddings, exactly as stock BART).

Decoder tags at generation time (the paper is silent): the decoder input at step t is the token y_{t-1} and
needs *its* tag. A `HypothesisTagger` (trained jointly, loss `tag_loss`) predicts it from the last
`decoder_tagger_window` tokens of the hypothesis, ending at that token (a causal window, so it never needs
tokens not generated yet). `prepare_inputs_for_generation` runs it on the running hypothesis, i.e. on the
`decoder_input_ids` that beam search has already reordered, so tags always follow their beam. Under teacher
forcing the same tagger on the same windows supplies the decoder's tags (`decoder_tags_in_training=
"predicted"`), so training and generation see the same function; "gold" feeds the real tagger's tags instead.

Why not a tag head on the decoder states (predicting the next token's tag)? At step t it cannot see which token
beam search picks, and its states are not reordered with the beams; the window tagger sees the token itself.
`docs/mvpe_pos.md` reports its accuracy against NLTK on reference translations.

Not function-preserving from stock BART (learned positions have no mvPE counterpart), so `stock_model_types`
is empty: `from_pretrained` loads this family's checkpoints only.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel, AutoModelForSeq2SeqLM, GenerationMixin
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.models.bart.modeling_bart import (
    BartAttention,
    BartDecoderLayer,
    BartEncoderLayer,
    BartForConditionalGeneration,
    BartModel,
    BartPreTrainedModel,
    BartScaledWordEmbedding,
    shift_tokens_right,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_mvpe_pos import (
    PAD_TAG_ID,
    SPECIAL_TAG_ID,
    UNK_TAG_ID,
    MvPEPosConfig,
)
from .extra_inputs import (
    IGNORE_INDEX,
    check_integer_tensor,
    check_source_inputs,
    check_target_inputs,
    checked_tag_ids,
    token_mask,
)
from .hub_support import HubModelMixin
from .seq2seq_scaffold import (
    cached_length,
    encode_decode,
    generation_head_forward,
    touch_parameters,
)
from .sinusoid import SinusoidalPositions
from .transformers_compat import CACHE_FIELD, cache_kwargs, renamed_cache_argument, take_cache

logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------------------
# Tag encoding (Eq. 11) and the decoder's hypothesis tagger
# ---------------------------------------------------------------------------------------------------------


class TagEncoding(nn.Module):
    """Tag id -> pos_dim vector: PE(id * k) of the mvPE sinusoid ("sinusoid", Eq. 11) or learned ("learned")."""

    def __init__(self, config: MvPEPosConfig, num_tag_ids: int):
        super().__init__()
        self.kind = config.pos_tag_encoding
        if self.kind == "sinusoid":
            self.table = SinusoidalPositions(num_tag_ids, config.pos_dim, config.pe_base, config.pe_step)
        else:
            self.table = nn.Embedding(num_tag_ids, config.pos_dim)

    def forward(self, tag_ids: torch.Tensor) -> torch.Tensor:
        return self.table(tag_ids)


def token_windows(token_ids: torch.Tensor, window: int, fill_id: int) -> torch.Tensor:
    """[batch, T] -> [batch, T, window]: row t holds tokens t-window+1..t (before the start: `fill_id`)."""
    padded = F.pad(token_ids, (window - 1, 0), value=fill_id)
    return padded.unfold(1, window, 1)


TAGGER_CONTEXT = "hypothesis_tagger_context"  # attribute of a decoder cache: the last window - 1 word embeddings


class HypothesisTagger(nn.Module):
    """Tags each decoder input token from itself and the `window - 1` tokens before it (causal MLP).

    Input: the decoder's word embeddings of the window, each layer-normalised (embeddings start tiny), then
    concatenated; output: logits over the decoder tag ids. It reads word embeddings, so `decoder_input_ids` and
    the same tokens given as `decoder_inputs_embeds` get the same tags; before the first token the window holds
    the embedding of `fill_id` (the pad token), or, in a cached decoding step, the tokens of earlier steps.
    """

    def __init__(self, config: MvPEPosConfig, word_dim: int, num_tag_ids: int):
        super().__init__()
        self.window, self.fill_id = config.decoder_tagger_window, config.pad_token_id
        self.norm = nn.LayerNorm(word_dim)
        self.hidden = nn.Linear(self.window * word_dim, config.decoder_tagger_hidden_size)
        self.out = nn.Linear(config.decoder_tagger_hidden_size, num_tag_ids)

    def forward(
        self,
        token_embeds: torch.Tensor,
        fill_embed: torch.Tensor,
        context: torch.Tensor | None = None,
        last: int | None = None,
    ) -> torch.Tensor:
        """Tag logits [batch, T, num_tag_ids] of the tokens embedded as `token_embeds` [batch, T, d] (of the `last`
        positions only when given). `context` [batch, c, d]: embeddings of the tokens before them (a cached step);
        `fill_embed` [1, 1, d] fills the window before the first token."""
        batch, _, dim = token_embeds.shape
        padded = token_embeds
        if self.window > 1:
            prefix = fill_embed.to(token_embeds.dtype).expand(batch, self.window - 1, dim)
            if context is not None:
                prefix = torch.cat([prefix, context.to(token_embeds.dtype)], dim=1)[:, -(self.window - 1) :]
            padded = torch.cat([prefix, token_embeds], dim=1)
        windows = padded.unfold(1, self.window, 1).transpose(-1, -2)  # [batch, T, window, d], as token_windows
        if last is not None:
            windows = windows[:, -last:]
        return self.out(F.gelu(self.hidden(self.norm(windows).flatten(-2))))


def shift_tags_right(tag_ids: torch.Tensor) -> torch.Tensor:
    """Tags of `labels` -> tags of `decoder_input_ids` (= labels shifted right; the start token is special)."""
    shifted = tag_ids.new_full(tag_ids.shape, SPECIAL_TAG_ID)
    shifted[:, 1:] = tag_ids[:, :-1]
    return shifted.masked_fill(shifted == IGNORE_INDEX, PAD_TAG_ID)


# ---------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------


@dataclass
class MvPEPosSeq2SeqModelOutput(Seq2SeqModelOutput):
    """`decoder_input_pos_tag_ids`: the tags the decoder used; `tag_logits`: the hypothesis tagger's logits
    (when it ran); `tag_loss`: its cross-entropy against the gold decoder tags (when given)."""

    decoder_input_pos_tag_ids: torch.LongTensor | None = None
    tag_logits: torch.FloatTensor | None = None
    tag_loss: torch.FloatTensor | None = None


@dataclass
class MvPEPosSeq2SeqLMOutput(Seq2SeqLMOutput):
    """`loss` = `translation_loss` + tag_loss_weight * `tag_loss`; both parts reported."""

    translation_loss: torch.FloatTensor | None = None
    tag_loss: torch.FloatTensor | None = None
    tag_logits: torch.FloatTensor | None = None
    decoder_input_pos_tag_ids: torch.LongTensor | None = None


# ---------------------------------------------------------------------------------------------------------
# Encoder and decoder: BART's layers, mvPE + tags at the input
# ---------------------------------------------------------------------------------------------------------


class MvPEPosPreTrainedModel(HubModelMixin, BartPreTrainedModel):
    """The one pre-trained base of this family (encoder, decoder, base model, generation model): BART's, plus the
    Hub and initialisation behaviour of every family (hub_support.HubModelMixin). `stock_model_types` is empty:
    BART's learned positions have no function-preserving mvPE counterpart, so `from_pretrained` loads this
    family's checkpoints only."""

    config_class = MvPEPosConfig
    config: MvPEPosConfig


class AugmentedInput(nn.Module):
    """Eq. 11 for one side: [E[w] * scale + mvPE(position) ; TagPE(tag)] (no LayerNorm, no dropout)."""

    def __init__(self, config: MvPEPosConfig, side: str):
        super().__init__()
        self.side, self.word_dim = side, config.word_dim(side)
        self.num_tag_ids = config.num_tag_ids(side) if config.has_tags(side) else 0
        self.max_positions = config.max_position_embeddings
        self.positions = SinusoidalPositions(
            config.max_position_embeddings, self.word_dim, config.pe_base, config.pe_step
        )
        self.tags = TagEncoding(config, self.num_tag_ids) if config.has_tags(side) else None

    def forward(
        self, word_embeds: torch.Tensor, start: int | torch.Tensor = 0, tag_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`start`: the first position, i.e. tokens already in the KV cache; a 0-dim tensor with a static cache,
        which is not branched on (a data-dependent branch breaks `torch.compile(fullgraph=True)`), as BART."""
        batch, length = word_embeds.shape[:2]
        if isinstance(start, int) and start + length > self.max_positions:
            raise ValueError(
                f"{self.side} length {start + length} exceeds max_position_embeddings={self.max_positions}"
            )
        position_ids = torch.arange(length, device=word_embeds.device) + start
        hidden = word_embeds + self.positions(position_ids).to(word_embeds.dtype)  # V_emb (+) V_mvPE
        if self.tags is None:
            return hidden
        if tag_ids is None:
            tag_ids = torch.full((batch, length), UNK_TAG_ID, dtype=torch.long, device=word_embeds.device)
        return torch.cat([hidden, self.tags(tag_ids).to(hidden.dtype)], dim=-1)  # (...) U V_PoST


class MvPEPosEncoder(MvPEPosPreTrainedModel):
    """BART's encoder layers behind the Eq. 11 input (`embed_tokens`, `layers`, `layernorm_embedding` as BART)."""

    _can_record_outputs = {"hidden_states": BartEncoderLayer, "attentions": BartAttention}

    def __init__(self, config: MvPEPosConfig):
        super().__init__(config)
        self.dropout, self.layerdrop = config.dropout, config.encoder_layerdrop
        embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = BartScaledWordEmbedding(
            config.vocab_size, config.word_dim("encoder"), config.pad_token_id, embed_scale=embed_scale
        )
        self.embed_inputs = AugmentedInput(config, "encoder")
        self.layers = nn.ModuleList([BartEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)])
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.gradient_checkpointing = False
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        r"""
        inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, d_model - pos_dim)`, *optional*):
            word embeddings (without positions and tags).
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            POS tag id of each source token (0 pad, 1 unknown, 2 special, 3.. `config.pos_tags`). Omitted on a
            tagged encoder: every token gets the unknown tag (a warning says so).
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        check_source_inputs(self.config, input_ids, attention_mask, inputs_embeds)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        shape = tuple(inputs_embeds.shape[:2])
        if self.embed_inputs.tags is not None:
            check = self.config.check_inputs
            if pos_tag_ids is None:
                logger.warning_once("no `pos_tag_ids` given: every source token is tagged <unk> (Eq. 11 input)")
                pos_tag_ids, check = torch.full(shape, UNK_TAG_ID, device=inputs_embeds.device), False
            mask = token_mask(attention_mask, shape, inputs_embeds.device)
            pos_tag_ids = checked_tag_ids("pos_tag_ids", pos_tag_ids, shape, mask, self.embed_inputs.num_tag_ids, check)
        hidden_states = self.layernorm_embedding(self.embed_inputs(inputs_embeds, 0, pos_tag_ids))
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class MvPEPosDecoder(MvPEPosPreTrainedModel):
    """BART's decoder layers behind the Eq. 11 input, plus the hypothesis tagger of its input tokens."""

    _can_record_outputs = {
        "hidden_states": BartDecoderLayer,
        "attentions": OutputRecorder(BartAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(BartAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: MvPEPosConfig):
        super().__init__(config)
        self.dropout, self.layerdrop = config.dropout, config.decoder_layerdrop
        embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        word_dim = config.word_dim("decoder")
        self.embed_tokens = BartScaledWordEmbedding(
            config.vocab_size, word_dim, config.pad_token_id, embed_scale=embed_scale
        )
        self.embed_inputs = AugmentedInput(config, "decoder")
        self.layers = nn.ModuleList([BartDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)])
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.hypothesis_tagger = (
            HypothesisTagger(config, word_dim, config.num_tag_ids("decoder")) if config.has_tags("decoder") else None
        )
        self.gradient_checkpointing = False
        self.post_init()

    def tag_logits(
        self, token_ids: torch.Tensor | None = None, last: int | None = None, inputs_embeds=None, cache=None
    ) -> torch.Tensor:
        """The hypothesis tagger's logits for `token_ids` or their word embeddings `inputs_embeds` (a running
        hypothesis or teacher-forced inputs). With a decoder `cache`, the windows of the first tokens reach back
        into the tokens of earlier calls (kept on the cache), so a cached step tags as the whole sequence would."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(token_ids)
        fill = self.embed_tokens(torch.full((1, 1), self.hypothesis_tagger.fill_id, device=inputs_embeds.device))
        context = getattr(cache, TAGGER_CONTEXT, None) if cache is not None else None
        logits = self.hypothesis_tagger(inputs_embeds, fill, context, last)
        keep = self.hypothesis_tagger.window - 1
        if cache is not None and keep > 0:
            seen = inputs_embeds if context is None else torch.cat([context, inputs_embeds], dim=1)
            setattr(cache, TAGGER_CONTEXT, seen[:, -keep:].detach())
        return logits

    @merge_with_config_defaults
    @capture_outputs
    @renamed_cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        pos_tag_ids: torch.LongTensor | None = None,
        cache=None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        r"""
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, target_sequence_length)`, *optional*):
            tag id of each decoder INPUT token (aligned with `input_ids`). Omitted: the hypothesis tagger tags
            `input_ids` (or `inputs_embeds`); with a cache, its windows reach back into earlier calls' tokens.
        past_key_values / cache: the decoder cache, under either transformers release's name (transformers_compat.py).
        """
        cache = take_cache(past_key_values, cache)
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of decoder_input_ids or decoder_inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        batch, length = inputs_embeds.shape[:2]
        past_length = cache.get_seq_length() if cache is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(batch, past_length + length, device=inputs_embeds.device)
        if self.hypothesis_tagger is not None and pos_tag_ids is None:
            pos_tag_ids = self.tag_logits(inputs_embeds=inputs_embeds, cache=cache).argmax(-1)
        hidden_states = self.layernorm_embedding(self.embed_inputs(inputs_embeds, past_length, pos_tag_ids))
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        self_attn_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        attention_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            **cache_kwargs(self_attn_cache),
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue
            hidden_states = layer(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                **cache_kwargs(cache),
                use_cache=use_cache,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **{CACHE_FIELD: cache})


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


class MvPEPosModel(MvPEPosPreTrainedModel):
    """BART encoder-decoder with mvPE + POS inputs; `forward` takes `pos_tag_ids` and `decoder_pos_tag_ids`."""

    _tied_weights_keys = BartModel._tied_weights_keys  # per instance below: None when the two sides differ

    def __init__(self, config: MvPEPosConfig):
        super().__init__(config)
        self.shares_embeddings = config.word_dim("encoder") == config.word_dim("decoder")
        if self.shares_embeddings:  # one vocabulary matrix for both sides, as BART (tied by key)
            embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
            self.shared = BartScaledWordEmbedding(
                config.vocab_size, config.word_dim("encoder"), config.pad_token_id, embed_scale=embed_scale
            )
            self._tied_weights_keys = {
                "encoder.embed_tokens.weight": "shared.weight",
                "decoder.embed_tokens.weight": "shared.weight",
            }
        else:  # one side is tagged, the other not: the word embeddings differ in width
            self._tied_weights_keys = None
        self.encoder = MvPEPosEncoder(config)
        self.decoder = MvPEPosDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared if self.shares_embeddings else self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        if not self.shares_embeddings:
            raise ValueError("encoder and decoder word embeddings differ in width (pos_tag_sides); set them directly")
        self.shared = value  # as BartModel
        self.encoder.embed_tokens = self.shared
        self.decoder.embed_tokens = self.shared

    def decoder_input_tags(
        self,
        decoder_input_ids,
        decoder_pos_tag_ids=None,
        decoder_input_pos_tag_ids=None,
        decoder_inputs_embeds=None,
        cache=None,
    ):
        """(tags of decoder_input_ids, tagger logits or None, tag_loss or None); see the module docstring. The
        tokens may come as `decoder_inputs_embeds` (word embeddings) instead; `cache`: see `tag_logits`."""
        if self.decoder.hypothesis_tagger is None:
            return None, None, None
        num_tag_ids, check = self.decoder.embed_inputs.num_tag_ids, self.config.check_inputs
        inputs = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
        if decoder_input_pos_tag_ids is not None:
            shape = tuple(decoder_input_pos_tag_ids.shape) if inputs is None else tuple(inputs.shape[:2])
            # a decoding step (the cache holds earlier tokens) feeds back the tags `prepare_inputs_for_generation`
            # took by argmax, always in range: their value check (a host sync per step) runs on the first call only
            step_check = check and not cached_length(cache)
            tags = checked_tag_ids(
                "decoder_input_pos_tag_ids", decoder_input_pos_tag_ids, shape, None, num_tag_ids, step_check
            )
            return tags, None, None
        if inputs is None:
            return None, None, None
        gold = None
        if decoder_pos_tag_ids is not None:
            gold = checked_tag_ids(
                "decoder_pos_tag_ids", decoder_pos_tag_ids, tuple(inputs.shape[:2]), None, num_tag_ids, check
            )
            gold = shift_tags_right(gold)
        embeds = decoder_inputs_embeds if decoder_input_ids is None else None
        logits = self.decoder.tag_logits(decoder_input_ids, inputs_embeds=embeds, cache=cache)
        tags = gold if gold is not None and self.config.decoder_tags_in_training == "gold" else logits.argmax(-1)
        loss = None
        if gold is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), gold.flatten(), ignore_index=PAD_TAG_ID)
        return tags, logits, loss

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
        pos_tag_ids: torch.LongTensor | None = None,
        decoder_pos_tag_ids: torch.LongTensor | None = None,
        decoder_input_pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MvPEPosSeq2SeqModelOutput:
        r"""
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token (Eq. 11).
        decoder_pos_tag_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            gold tag id of each TARGET token, aligned with `labels` (as `xlpe.features.prepare` and the collator give
            them). They train the hypothesis tagger (`tag_loss`) and, with `decoder_tags_in_training="gold"`,
            shifted right they are the decoder's input tags.
        decoder_input_pos_tag_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            tags of `decoder_input_ids` themselves; generation passes them (from the running hypothesis).
        """
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise ValueError("pass `decoder_input_ids`, `decoder_inputs_embeds` or `input_ids`")
            decoder_input_ids = shift_tokens_right(
                input_ids, self.config.pad_token_id, self.config.decoder_start_token_id
            )
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        cache = take_cache(past_key_values, cache)
        if use_cache and cache is None:  # made here: the tagger keeps its window context on it
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        # checked once, here: the hypothesis tagger embeds the ids before encode_decode would check them
        check_target_inputs(self.config, decoder_input_ids, past_length=cached_length(cache))
        tags, tag_logits, tag_loss = self.decoder_input_tags(
            decoder_input_ids, decoder_pos_tag_ids, decoder_input_pos_tag_ids, decoder_inputs_embeds, cache
        )
        return encode_decode(
            self,
            MvPEPosSeq2SeqModelOutput,
            BaseModelOutput,
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            check_targets=False,
            encoder_kwargs={"pos_tag_ids": pos_tag_ids},
            decoder_kwargs={"pos_tag_ids": tags},
            extras={"decoder_input_pos_tag_ids": tags, "tag_logits": tag_logits, "tag_loss": tag_loss},
            **kwargs,
        )


class MvPEPosForConditionalGeneration(MvPEPosPreTrainedModel, GenerationMixin):
    """The augmented Transformer for translation. `generate(**batch)` tags generated tokens itself;
    the translation pipeline tags raw source text with `config.pos_tagger` (`prepare_pipeline_inputs`)."""

    accepts_loss_kwargs = True  # loss weighted by `num_items_in_batch` (seq2seq_scaffold.weight_by_global_tokens)
    # stock BartForConditionalGeneration behaviour: functions that do not call super(), so they serve this class
    _tied_weights_keys = BartForConditionalGeneration._tied_weights_keys  # per instance below
    _keys_to_ignore_on_load_missing = BartForConditionalGeneration._keys_to_ignore_on_load_missing
    _resize_final_logits_bias = BartForConditionalGeneration._resize_final_logits_bias
    prepare_decoder_input_ids_from_labels = BartForConditionalGeneration.prepare_decoder_input_ids_from_labels

    def __init__(self, config: MvPEPosConfig):
        super().__init__(config)
        self.model = MvPEPosModel(config)
        word_dim = config.word_dim("decoder")
        tied = config.tie_word_embeddings
        # d_model -> d_w before the tied lm_head when the decoder's word embeddings are narrower (module doc)
        self.output_projection = (
            nn.Linear(config.d_model, word_dim, bias=False) if tied and word_dim < config.d_model else None
        )
        self.lm_head = nn.Linear(word_dim if tied else config.d_model, config.vocab_size, bias=False)
        self.final_logits_bias = nn.Buffer(torch.zeros((1, config.vocab_size)))
        source = "model.shared.weight" if self.model.shares_embeddings else "model.decoder.embed_tokens.weight"
        self._tied_weights_keys = {"lm_head.weight": source}  # honoured only with tie_word_embeddings=True
        for target, shared in (self.model._tied_weights_keys or {}).items():
            self._tied_weights_keys[f"model.{target}"] = f"model.{shared}"
        self.post_init()

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """As `BartForConditionalGeneration`'s: `final_logits_bias` follows the vocabulary."""
        new_embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        self._resize_final_logits_bias(new_embeddings.weight.shape[0])
        return new_embeddings

    def add_auxiliary_losses(self, token_loss, outputs, labels):
        """`token_loss` + tag_loss_weight * the hypothesis tagger's loss; without its supervision (no gold decoder
        tags), a zero-weighted term over the tagger's parameters, so that DDP sees them used."""
        if outputs.tag_loss is not None:
            return token_loss + self.config.tag_loss_weight * outputs.tag_loss
        return token_loss + touch_parameters(self.model.decoder.hypothesis_tagger)

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
        pos_tag_ids: torch.LongTensor | None = None,
        decoder_pos_tag_ids: torch.LongTensor | None = None,
        decoder_input_pos_tag_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MvPEPosSeq2SeqLMOutput:
        r"""
        pos_tag_ids (`torch.LongTensor` of shape `(batch_size, source_length)`, *optional*):
            POS tag id of each source token (Eq. 11); omitted: all <unk>.
        decoder_pos_tag_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            gold tag id of each `labels` token: trains the hypothesis tagger (`tag_loss`), and is the decoder's
            input (shifted right) with `decoder_tags_in_training="gold"`. Ignored by `generate`.
        decoder_input_pos_tag_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            tags of `decoder_input_ids` themselves (set by `prepare_inputs_for_generation`).
        """

        def check_target_tags(labels):
            if decoder_pos_tag_ids is not None and self.config.check_inputs:
                check_integer_tensor("decoder_pos_tag_ids", decoder_pos_tag_ids, tuple(labels.shape))

        return generation_head_forward(
            self,
            MvPEPosSeq2SeqLMOutput,
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
            pos_tag_ids=pos_tag_ids,
            decoder_pos_tag_ids=decoder_pos_tag_ids,
            decoder_input_pos_tag_ids=decoder_input_pos_tag_ids,
            auxiliary_losses=self.add_auxiliary_losses,
            check_target_extras=check_target_tags,
            **kwargs,
        )

    # --- generation: tags of the running hypothesis -------------------------------------------------------
    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        """`input_ids` is the whole (beam-reordered) hypothesis: its new tokens are tagged from it. The cache passes
        through under the name the installed transformers gives it."""
        kwargs.pop("decoder_pos_tag_ids", None)  # gold target tags (Seq2SeqTrainer passes whole batches): unused
        kwargs.pop("decoder_input_pos_tag_ids", None)
        model_inputs = super().prepare_inputs_for_generation(input_ids, **kwargs)
        if self.model.decoder.hypothesis_tagger is not None:
            new_tokens = model_inputs["decoder_input_ids"].shape[1]
            # only the tokens the new tokens' windows reach (window - 1 before them): O(window) per step, not O(T)
            recent = input_ids[:, -(self.model.decoder.hypothesis_tagger.window - 1 + new_tokens) :]
            with torch.no_grad():
                logits = self.model.decoder.tag_logits(recent.to(self.device), last=new_tokens)
            model_inputs["decoder_input_pos_tag_ids"] = logits.argmax(-1)
        return model_inputs


# with the Auto classes and for Hub custom code (save_pretrained writes auto_map and copies the code files)
MvPEPosModel.register_for_auto_class("AutoModel")
MvPEPosForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoModel.register(MvPEPosConfig, MvPEPosModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(MvPEPosConfig, MvPEPosForConditionalGeneration, exist_ok=True)


__all__ = ["MvPEPosForConditionalGeneration", "MvPEPosModel", "MvPEPosPreTrainedModel"]
