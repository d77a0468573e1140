"""Encoder-decoder scaffolding shared by every model family (written once, imported by each modeling file).

A family differs from stock MarianMT/BART only in its encoder (and, for mvPE+POS, its embeddings); the body
(`shared` embeddings + encoder + decoder), the generation head (`lm_head` + `final_logits_bias`), the
encoder → decoder plumbing and the output assembly are the same. These helpers build and run them so that each
`modeling_<family>.py` keeps only what is specific to its paper:

* `InitOwnParametersMixin`: one `_init_weights` rule for every family (through hub_support.HubModelMixin, the
  base of each family's `<Family>PreTrainedModel`) and for a stock decoder with new modules: after the stock
  initialisation, a module that defines `init_own_parameters()` (XL fusion and gate, DPE gate, sinusoid tables)
  initialises itself.
* `init_marian_encoder_parts`, `embed_source`, `run_encoder_layers`: the parts of `MarianEncoder` a family's
  encoder keeps (same submodule names), its embedding prologue and its LayerDrop loop.
* `init_marian_body(model, config, encoder)` / `init_marian_head(model, config, base_model)`: the stock
  submodule names (so stock checkpoints load) and the tied-weight maps of transformers 5.
* `encode_decode(model, output_class, ...)`: run the encoder (unless `encoder_outputs` are given, as in
  generation) with the family's extra encoder inputs, then the decoder; every extra field of `output_class`
  (e.g. `reorder_positions`, `order_loss`) is copied from the encoder output of the same name.
* `generation_head_forward(model, output_class, ...)`: the generation head's forward, written once for every
  family: teacher-forcing inputs from `labels`, the base model, logits, the translation loss plus the family's
  auxiliary losses, the loss weighting of gradient accumulation, the output assembly. Its parts:
  `decoder_inputs_from_labels`, `translation_loss`, `weight_by_global_tokens`, `lm_output`.
* `touch_parameters`: a zero-weighted term over a module's parameters, added to the loss when an auxiliary
  module ran without its own supervision, so that every trainable parameter gets a gradient at every step
  (DDP with `find_unused_parameters=False`).

Return types: the families' `forward`s are decorated with transformers' `can_return_tuple` (`return_dict=False`
gives `output.to_tuple()`, as in stock Marian/BART); inside, encoder, decoder and base model are always called
with `return_dict=True`, so the plumbing reads fields by name whatever the caller or `config.return_dict` asked.

Flat file, imports only torch/transformers and its siblings `extra_inputs.py` (the input checks) and
`transformers_compat.py` (the cache's name per release): it travels as Hub custom code with the modeling files.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import fields

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.models.marian.modeling_marian import (
    MarianDecoder,
    MarianEncoderLayer,
    MarianModel,
    MarianMTModel,
    MarianSinusoidalPositionalEmbedding,
    shift_tokens_right,
)

from .extra_inputs import check_source_inputs, check_target_inputs
from .guided_alignment import CrossAttentionCapture, guided_alignment_cost
from .transformers_compat import CACHE_FIELD, cache_kwargs, output_cache, take_cache

_MODEL_OUTPUT_FIELDS = {f.name for f in fields(Seq2SeqModelOutput)}
_LM_OUTPUT_FIELDS = {f.name for f in fields(Seq2SeqLMOutput)}


class InitOwnParametersMixin:
    """Put before a stock `PreTrainedModel` class: its `_init_weights` also calls each module's
    `init_own_parameters()` (parameters and tables the stock initialisation does not know). `_init_weights` runs
    for every module at `post_init` and for the modules a checkpoint does not cover at `from_pretrained`
    (meta-device loading), so state filled here (e.g. non-persistent sinusoid tables) survives both."""

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        init_own_parameters = getattr(module, "init_own_parameters", None)
        if callable(init_own_parameters):
            init_own_parameters()


def extra_fields(output_class, standard: set[str]) -> list[str]:
    """Fields of the output dataclass `output_class` beyond `standard`. Reads `__dataclass_fields__` (a plain
    dict) rather than calling `dataclasses.fields()`, which torch.compile cannot trace (a graph break at
    every forward)."""
    return [name for name in output_class.__dataclass_fields__ if name not in standard]


# ---------------------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------------------


def init_marian_encoder_parts(encoder: nn.Module, config) -> None:
    """`MarianEncoder`'s attributes and submodules: embed_tokens, embed_positions (sinusoid), layers, ..."""
    encoder.dropout, encoder.layerdrop = config.dropout, config.encoder_layerdrop
    encoder.padding_idx = config.pad_token_id
    encoder.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    encoder.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, encoder.padding_idx)
    encoder.embed_positions = MarianSinusoidalPositionalEmbedding(config.max_position_embeddings, config.d_model)
    encoder.layers = nn.ModuleList([MarianEncoderLayer(config) for _ in range(config.encoder_layers)])
    encoder.gradient_checkpointing = False


def embed_source(encoder: nn.Module, input_ids, inputs_embeds, attention_mask=None) -> torch.Tensor:
    """Scaled token embeddings X (or the given `inputs_embeds`), after checking the inputs (extra_inputs.py)."""
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    check_source_inputs(encoder.config, input_ids, attention_mask, inputs_embeds)
    if inputs_embeds is None:
        inputs_embeds = encoder.embed_tokens(input_ids) * encoder.embed_scale
    length, limit = inputs_embeds.shape[1], encoder.config.max_position_embeddings
    if length > limit:
        raise ValueError(f"input length {length} exceeds max_position_embeddings={limit}")
    return inputs_embeds


def run_encoder_layers(encoder: nn.Module, hidden_states, attention_mask, layer_kwargs=None, **kwargs):
    """The encoder layers with LayerDrop in training; `layer_kwargs` maps a layer's index to keyword arguments for
    that layer only (XL PE: HeadXL's Z_XL for layer 0, the XL heads' positions)."""
    for index, layer in enumerate(encoder.layers):
        if encoder.training and encoder.layerdrop > 0.0 and torch.rand([]) < encoder.layerdrop:
            continue
        extra = layer_kwargs.get(index, {}) if layer_kwargs else {}
        if extra and layer.training and getattr(layer, "gradient_checkpointing", False):
            hidden_states = checkpointed_layer(layer, hidden_states, attention_mask, extra, kwargs)
        else:
            hidden_states = layer(hidden_states, attention_mask, **extra, **kwargs)
    return hidden_states


def checkpointed_layer(layer: nn.Module, hidden_states, attention_mask, extra: dict, kwargs: dict):
    """A gradient-checkpointed layer call whose per-layer tensors (`extra`, e.g. HeadXL's Z_XL) are inputs of the
    checkpoint. transformers' `GradientCheckpointingLayer` checkpoints the positional arguments only and binds the
    keyword ones into the recomputed function: under `use_reentrant=True` a keyword tensor that requires grad then
    links the recomputation to the outer graph, whose backward has already run ("backward through the graph a
    second time"). Here the layer is called as usual (its hooks run once, outside the checkpoint), and for this
    call its checkpoint function receives the tensors of `extra` as further positional inputs, handed to the
    layer's forward by name."""
    names = [name for name, value in extra.items() if torch.is_tensor(value)]
    fixed = {name: value for name, value in extra.items() if name not in names}
    checkpoint = layer._gradient_checkpointing_func

    def checkpoint_with_extra_inputs(function, *args):
        count = len(args)
        return checkpoint(
            lambda *inputs: function(*inputs[:count], **dict(zip(names, inputs[count:]))),
            *args,
            *(extra[name] for name in names),
        )

    layer._gradient_checkpointing_func = checkpoint_with_extra_inputs
    try:
        return layer(hidden_states, attention_mask, **fixed, **kwargs)
    finally:
        layer._gradient_checkpointing_func = checkpoint


def init_marian_body(model: nn.Module, config, encoder: nn.Module, decoder: nn.Module | None = None) -> None:
    """`shared` (when encoder and decoder share embeddings), `encoder`, `decoder`, as in `MarianModel`."""
    if config.share_encoder_decoder_embeddings:
        model.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        model._tied_weights_keys = {
            "decoder.embed_tokens.weight": "shared.weight",
            "encoder.embed_tokens.weight": "shared.weight",
        }
    else:
        model._tied_weights_keys = None
    model.encoder = encoder
    model.decoder = decoder if decoder is not None else MarianDecoder(config)


def init_marian_head(model: nn.Module, config, base_model: nn.Module) -> None:
    """`model`, `final_logits_bias`, `lm_head`, as in `MarianMTModel`."""
    model.model = base_model
    if config.share_encoder_decoder_embeddings:
        model._tied_weights_keys = {
            "lm_head.weight": "model.shared.weight",
            "model.decoder.embed_tokens.weight": "model.shared.weight",
            "model.encoder.embed_tokens.weight": "model.shared.weight",
        }
    else:
        model._tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
    target_vocab_size = config.vocab_size if config.share_encoder_decoder_embeddings else config.decoder_vocab_size
    model.final_logits_bias = nn.Buffer(torch.zeros((1, target_vocab_size)))
    model.lm_head = nn.Linear(config.d_model, target_vocab_size, bias=False)


def stock_behaviour(stock: type, names: tuple[str, ...], **own):
    """Class decorator: what a flat class keeps of the stock class it no longer derives from: `stock`'s attributes
    `names` as they are (class tables, and functions that do not call super(), so they serve any class), and
    `own` functions in place of stock ones that do call super()."""

    def take(cls: type) -> type:
        for name in names:
            setattr(cls, name, inspect.getattr_static(stock, name))
        for name, function in own.items():
            setattr(cls, name, function)
        return cls

    return take


def resize_token_embeddings_and_bias(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
    """`MarianMTModel.resize_token_embeddings` for a flat class: with shared embeddings, `final_logits_bias`
    follows the vocabulary."""
    new_embeddings = PreTrainedModel.resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of, mean_resizing)
    if self.config.share_encoder_decoder_embeddings:
        self._resize_final_logits_bias(new_num_tokens)
    return new_embeddings


# what the Marian-based families' base model and generation model keep of MarianModel and MarianMTModel
marian_model_behaviour = stock_behaviour(
    MarianModel,
    (
        "_keys_to_ignore_on_load_missing",
        "get_input_embeddings",
        "set_input_embeddings",
        "get_decoder_input_embeddings",
        "set_decoder_input_embeddings",
        "resize_decoder_token_embeddings",
    ),
)
marian_mt_model_behaviour = stock_behaviour(
    MarianMTModel,
    (
        "_keys_to_ignore_on_load_missing",
        "_keys_to_ignore_on_save",
        "_tied_weights_keys",
        "_resize_token_embeddings",
        "resize_decoder_token_embeddings",
        "_resize_final_logits_bias",
        "set_output_embeddings",
        "prepare_decoder_input_ids_from_labels",
    ),
    resize_token_embeddings=resize_token_embeddings_and_bias,
)


# ---------------------------------------------------------------------------------------------------------
# Forward plumbing
# ---------------------------------------------------------------------------------------------------------


def encode_decode(
    model: nn.Module,
    output_class,
    encoder_output_class,
    *,
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
    check_targets: bool = True,
    encoder_kwargs: dict | None = None,
    decoder_kwargs: dict | None = None,
    extras: dict | None = None,
    **kwargs,
):
    """Encoder (skipped when `encoder_outputs` are given) then decoder; returns `output_class`. Its extra fields
    come from `extras` when given there, else from the encoder output's field of the same name. The decoder cache
    comes as `past_key_values` or `cache` (transformers_compat.py) and goes on under the installed release's name.
    `check_targets=False`: the caller has checked `decoder_input_ids` already (one host sync, not two)."""
    cache = take_cache(past_key_values, cache)
    if encoder_outputs is None:
        encoder_outputs = model.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            **(encoder_kwargs or {}),
            **kwargs,
        )
    elif not isinstance(encoder_outputs, BaseModelOutput):
        encoder_outputs = encoder_output_class(*encoder_outputs)
    if check_targets:
        check_target_inputs(model.config, decoder_input_ids, past_length=cached_length(cache))
    decoder_outputs = model.decoder(
        input_ids=decoder_input_ids,
        attention_mask=decoder_attention_mask,
        encoder_hidden_states=encoder_outputs[0],
        encoder_attention_mask=attention_mask,
        **cache_kwargs(cache),
        inputs_embeds=decoder_inputs_embeds,
        use_cache=use_cache,
        **(decoder_kwargs or {}),
        return_dict=True,
        **kwargs,
    )
    extras = {
        name: (extras or {}).get(name, getattr(encoder_outputs, name, None))
        for name in extra_fields(output_class, _MODEL_OUTPUT_FIELDS)
    }
    return output_class(
        last_hidden_state=decoder_outputs.last_hidden_state,
        **{CACHE_FIELD: output_cache(decoder_outputs)},
        decoder_hidden_states=decoder_outputs.hidden_states,
        decoder_attentions=decoder_outputs.attentions,
        cross_attentions=decoder_outputs.cross_attentions,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states,
        encoder_attentions=encoder_outputs.attentions,
        **extras,
    )


def cached_length(cache) -> int | None:
    """Tokens already in the decoder's KV cache: an int in eager mode with a dynamic cache, else None (not read
    under torch.compile, and a static cache's length is a tensor: reading it would sync)."""
    if cache is None:
        return 0
    if torch.compiler.is_compiling():
        return None
    length = cache.get_seq_length()
    return length if isinstance(length, int) else None


def decoder_inputs_from_labels(config, labels, decoder_input_ids, decoder_inputs_embeds, use_cache):
    """With labels: no cache, and teacher-forcing inputs = labels shifted right (as MarianMTModel does)."""
    if labels is None:
        return decoder_input_ids, use_cache
    check_target_inputs(config, labels=labels)
    if decoder_input_ids is None and decoder_inputs_embeds is None:
        decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    return decoder_input_ids, False


def translation_loss(
    logits: torch.Tensor, labels: torch.Tensor | None, label_smoothing: float = 0.0
) -> torch.Tensor | None:
    """Token-level cross-entropy (mean over non -100 labels), in float32 whatever the logits' dtype.

    `label_smoothing` = epsilon (Szegedy et al. 2016; 0.1 in both papers' recipes): (1 - eps) * NLL + eps * mean
    over the vocabulary of -log p, the same formula as transformers' `LabelSmoother` and fairseq's
    `label_smoothed_cross_entropy`. It lives in the model (config field `label_smoothing`) so that the auxiliary
    losses, which need `labels` in `forward`, survive it: the Trainer's own smoother takes `labels` away."""
    if labels is None:
        return None
    labels = labels.reshape(-1).to(logits.device)
    summed = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels, reduction="sum", label_smoothing=label_smoothing
    )
    return summed / (labels != -100).sum().clamp_min(1)  # the mean; 0 (not NaN) for a batch with no supervised token


def weight_by_global_tokens(loss: torch.Tensor | None, labels: torch.Tensor | None, num_items_in_batch=None):
    """`loss` (this batch's per-token mean, auxiliary terms included) times this batch's share of the supervised
    target tokens of the whole optimizer step: (labels != -100).sum() / `num_items_in_batch`.

    The Trainer passes `num_items_in_batch` (the supervised tokens of every gradient-accumulation micro-batch,
    summed over processes) to models whose `accepts_loss_kwargs` is True, and then neither divides by the
    accumulation steps nor lets DDP's gradient average shrink the loss (it multiplies by the number of processes).
    Weighted this way the translation loss of an optimizer step is exactly the token mean of one big batch, as in
    fairseq, whatever the split into micro-batches and processes; each auxiliary loss (a per-batch mean over its
    own units: source tokens, target positions, tags) is weighted by its batch's share of target tokens. Without
    `num_items_in_batch` (plain `forward`, evaluation on one process) `loss` is returned unchanged."""
    if loss is None or labels is None or num_items_in_batch is None:
        return loss
    supervised = (labels != -100).sum().to(loss.device, loss.dtype)
    return loss * supervised / torch.as_tensor(num_items_in_batch, device=loss.device, dtype=loss.dtype).clamp_min(1)


def touch_parameters(module: nn.Module | None) -> torch.Tensor | float:
    """0 * (sum of `module`'s trainable parameters): added to a loss, it gives each of them a (zero) gradient.

    An auxiliary module that ran without its own supervision (the reorder predictor ranking positions by argsort,
    the hypothesis tagger picking tags by argmax) otherwise leaves its parameters out of the backward graph, and
    DDP with `find_unused_parameters=False` then fails (or needs an extra graph traversal every step with True).
    The set of parameters is fixed per module, so it traces into one graph under torch.compile."""
    if module is None:
        return 0.0
    terms = [parameter.sum() for parameter in module.parameters() if parameter.requires_grad]
    return torch.stack(terms).sum() * 0.0 if terms else 0.0


def lm_output(output_class, outputs, logits, loss, **losses):
    """`output_class` with the standard fields copied from the base model's `outputs`, `loss`, the named
    auxiliary `losses`, and every other extra field copied from `outputs` by name."""
    extras = {name: getattr(outputs, name, None) for name in extra_fields(output_class, _LM_OUTPUT_FIELDS)}
    extras.update(losses)
    return output_class(
        loss=loss,
        logits=logits,
        **{CACHE_FIELD: output_cache(outputs)},
        decoder_hidden_states=outputs.decoder_hidden_states,
        decoder_attentions=outputs.decoder_attentions,
        cross_attentions=outputs.cross_attentions,
        encoder_last_hidden_state=outputs.encoder_last_hidden_state,
        encoder_hidden_states=outputs.encoder_hidden_states,
        encoder_attentions=outputs.encoder_attentions,
        **extras,
    )


# ---------------------------------------------------------------------------------------------------------
# The generation head's forward
# ---------------------------------------------------------------------------------------------------------


def generation_head_forward(
    model: nn.Module,
    output_class,
    *,
    labels=None,
    decoder_input_ids=None,
    decoder_inputs_embeds=None,
    use_cache=None,
    past_key_values=None,
    cache=None,
    auxiliary_losses=None,
    check_target_extras=None,
    alignment_links=None,
    **model_inputs,
):
    """The `forward` of every family's generation model, around its base model `model.model`.

    1. With `labels`: no cache, and `decoder_input_ids` = labels shifted right unless decoder inputs are given;
       then `check_target_extras(labels)` (the family's checks of target-side extra inputs), when given.
    2. The base model, with `model_inputs` (the encoder inputs, the family's extra inputs, the decoder mask, the
       encoder outputs, ...) and the decoder cache (`past_key_values` or `cache`, transformers_compat.py).
    3. logits = lm_head(h) + final_logits_bias, h the decoder output (through `model.output_projection` first
       when the model has one: mvPE+POS's d_model -> d_w before a tied, narrower lm_head).
    4. With `labels`: loss = `auxiliary_losses(translation_loss, outputs, labels)` (the family's Eq.: the reorder,
       order or tag loss, or a zero-weighted touch of an unsupervised module; `translation_loss` alone when not
       given), plus guided_alignment_weight * the guided alignment cost when the config's weight is > 0 and
       `alignment_links` are given (guided_alignment.py; the supervised cross-attention is captured then only),
       weighted by `num_items_in_batch` (in `model_inputs` when the Trainer passes it).
    5. `output_class` (`lm_output`): the base model's fields, the logits, `loss`, `translation_loss`, and every
       other extra field of `output_class` copied from the base model's output by name."""
    num_items_in_batch = model_inputs.pop("num_items_in_batch", None)  # Trainer: supervised tokens of the step
    decoder_input_ids, use_cache = decoder_inputs_from_labels(
        model.config, labels, decoder_input_ids, decoder_inputs_embeds, use_cache
    )
    if labels is not None and check_target_extras is not None:
        check_target_extras(labels)
    guided_weight = getattr(model.config, "guided_alignment_weight", 0.0)
    guided = guided_weight > 0 and labels is not None and alignment_links is not None
    capture = CrossAttentionCapture(model.model.decoder, model.config.guided_alignment_layer) if guided else None
    with capture if guided else contextlib.nullcontext():
        outputs = model.model(
            decoder_input_ids=decoder_input_ids,
            cache=take_cache(past_key_values, cache),
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **model_inputs,
        )
    projection = getattr(model, "output_projection", None)
    hidden = outputs[0] if projection is None else projection(outputs[0])
    logits = model.lm_head(hidden) + model.final_logits_bias.to(hidden.device)
    loss = token_loss = translation_loss(logits, labels, model.config.label_smoothing)
    if token_loss is not None and auxiliary_losses is not None:
        loss = auxiliary_losses(token_loss, outputs, labels)
    losses = {"translation_loss": token_loss}
    if guided:
        probabilities = capture.probabilities(model_inputs.get("attention_mask"), model.config.guided_alignment_head)
        losses["guided_alignment_loss"] = guided_alignment_cost(
            probabilities, alignment_links, labels, model.config.guided_alignment_cost, model.config.check_inputs
        )
        loss = loss + guided_weight * losses["guided_alignment_loss"]
    loss = weight_by_global_tokens(loss, labels, num_items_in_batch)
    return lm_output(output_class, outputs, logits, loss, **losses)
