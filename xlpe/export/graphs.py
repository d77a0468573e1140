"""The ONNX graphs of a translation model: what each one takes and gives, the `torch.nn.Module` wrappers that the
exporter traces, and the export itself (`torch.onnx.export`, the TorchScript-based exporter: `dynamo=False`).

Three graphs per model (the layout optimum and transformers.js use for Marian, plus the family's extra inputs):

* `encoder_model.onnx`: `input_ids`, `attention_mask` [batch, source] and the family's extra source inputs ->
  `last_hidden_state`. XL PE with the built-in predictor computes its positions inside the graph (scores, word
  means, a stable ranking: `TopK`, whose ties ONNX orders by index as `torch.sort(stable=True)` does); XL PE with
  an attached standalone reorderer takes `reorder_positions` (the front end decodes them: runtime.py); a model
  with source POS tags (`pos_tagger`, mvPE+POS `pos_tag_sides` encoder/both) takes `pos_tag_ids`.
* `decoder_model.onnx` (the first step, no cache): `decoder_input_ids` [batch, target], `encoder_hidden_states`,
  `encoder_attention_mask` -> `logits` of the last position [batch, vocab] and the cache
  (`present.<layer>.decoder.key|value`, `present.<layer>.encoder.key|value`).
* `decoder_with_past_model.onnx` (every later step): `decoder_input_ids` [batch, 1], `encoder_attention_mask`,
  `past_key_values.<layer>.decoder|encoder.key|value` (the cross-attention ones [sentences, ...]: once per
  sentence, not per beam) -> `logits` [batch, vocab] and `present.<layer>.decoder.key|value`. The cross-attention
  cache never changes; the caller keeps it. The self-attention cache takes one of two forms, recorded as
  `GraphLayout.self_attention_cache` (step_caches.py):
  - "indirect" (wherever the decoder's attention and the installed onnxruntime allow it): buffers [batch, heads,
    capacity, head_dim] in and out, written in place by onnxruntime when the caller binds both to one buffer, and
    `cache_indirection` [sentences, beams, length] saying which beam row holds each earlier position;
  - "appended" (a self-attention with relative or directional terms, or an onnxruntime without the kernel): the
    past in, the keys and values of the step's own token out ([batch, heads, 1, head_dim]), which the caller
    appends to the cache as it reorders it (no copy of the cache inside the graph).

mvPE+POS with decoder tags: both decoder graphs also take `tagger_input_ids` [batch, window - 1 + target], the
last tokens of the running hypothesis left-filled with the pad id, and run the hypothesis tagger on them inside
the graph (what `prepare_inputs_for_generation` does in PyTorch), so the decoder's tags follow their beam.

The wrappers call the model's own `forward` with a transformers `EncoderDecoderCache` built from the explicit
tensors: no model code is copied, and what the export traces is what `generate` runs.
"""

from __future__ import annotations

import torch
from torch import nn

from .graph_names import (  # noqa: F401  (the graphs' names and layout: re-exported)
    DECODER_FILE,
    DECODER_WITH_PAST_FILE,
    DEFAULT_OPSET,
    ENCODER_FILE,
    GRAPH_FILES,
    SELF_ATTENTION_CACHES,
    GraphLayout,
)
from .onnx_fixes import exportable_attention, fix_graph, register_symbolics
from .step_caches import (
    AppendedKeysLayer,
    BufferedKeysLayer,
    TracedCaches,
    appended_cache_attention,
    appended_tensors,
    buffered_tensors,
    held_layer,
    indirect_attention_available,
    indirect_cache_supported,
)


def graph_layout(model) -> GraphLayout:
    """The `GraphLayout` of a loaded model (an xlpe family or stock MarianMT): the "indirect" self-attention cache
    where the model's attention allows it and the installed onnxruntime has the kernel (step_caches.py), else the
    "appended" one."""
    config = model.config
    family = config.model_type
    uses = getattr(config, "uses_extra_input", lambda name: False)
    encoder = model.get_encoder()
    decoder_tags = family == "mvpe_pos" and model.model.decoder.hypothesis_tagger is not None
    return GraphLayout(
        family=family,
        source_tags=bool(uses("pos_tag_ids")),
        reorder_positions=getattr(encoder, "reorderer", None) is not None,
        predicted_positions=bool(getattr(encoder, "uses_xl", False)) and getattr(encoder, "reorderer", None) is None,
        tagger_window=int(config.decoder_tagger_window) if decoder_tags else 0,
        decoder_layers=int(config.decoder_layers),
        decoder_heads=int(config.decoder_attention_heads),
        head_dim=int(config.d_model) // int(config.decoder_attention_heads),
        self_attention_cache="indirect"
        if indirect_cache_supported(model) and indirect_attention_available()
        else "appended",
    )


# ---------------------------------------------------------------------------------------------------------
# Wrappers: explicit tensors in and out, the model's own forward inside
# ---------------------------------------------------------------------------------------------------------


class EncoderGraph(nn.Module):
    """input_ids, attention_mask (+ the layout's extra inputs, in `GraphLayout.encoder_inputs` order) -> states."""

    def __init__(self, model, layout: GraphLayout):
        super().__init__()
        self.encoder, self.layout = model.get_encoder(), layout
        self.eval()  # the exporter restores a wrapper's mode on the model inside it: keep eval

    def forward(self, input_ids, attention_mask, *extra):
        kwargs = dict(zip(self.layout.encoder_inputs[2:], extra))
        outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **kwargs)
        if self.layout.predicted_positions:
            return outputs.last_hidden_state, outputs.reorder_positions
        return outputs.last_hidden_state


class DecoderGraph(nn.Module):
    """One decoder call with an explicit cache: the first step (`with_past=False`) or a later one, whose cache
    layers record what they return in `traced` (the export call's `TracedCaches`, read by its attention functions)."""

    def __init__(self, model, layout: GraphLayout, with_past: bool, traced: TracedCaches | None = None):
        super().__init__()
        if with_past and traced is None:
            raise ValueError("traced: a later step's graph records its cache layers in the export call's TracedCaches")
        self.model, self.layout, self.with_past, self.traced = model, layout, with_past, traced
        self.eval()

    def tags(self, tagger_input_ids, new_tokens: int):
        """The hypothesis tagger's tags of the last `new_tokens` tokens (modeling_mvpe_pos.HypothesisTagger)."""
        return self.model.model.decoder.tag_logits(tagger_input_ids, last=new_tokens).argmax(-1)

    def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask, *rest):
        from transformers.cache_utils import EncoderDecoderCache
        from transformers.modeling_outputs import BaseModelOutput

        tagger_input_ids = rest[0] if self.layout.tagger_window else None
        past = rest[1:] if self.layout.tagger_window else rest
        kwargs = {}
        if tagger_input_ids is not None:
            kwargs["decoder_input_pos_tag_ids"] = self.tags(tagger_input_ids, decoder_input_ids.shape[1])
        indirect = self.with_past and self.layout.indirect_cache
        if indirect:  # the last input is the beams' history (step_caches.py)
            past, indirection = past[:-1], past[-1]
        cache = None
        if self.with_past:  # the given tensors held as they are, recorded in `traced` (step_caches.py)
            cache = EncoderDecoderCache([tuple(past[4 * i : 4 * i + 4]) for i in range(self.layout.decoder_layers)])
            own, cross = cache.self_attention_cache.layers, cache.cross_attention_cache.layers
            for i in range(self.layout.decoder_layers):
                if indirect:
                    own[i] = BufferedKeysLayer(past[4 * i], past[4 * i + 1], indirection, self.traced)
                else:
                    own[i] = AppendedKeysLayer(past[4 * i], past[4 * i + 1], self.traced)
                cross[i] = held_layer(past[4 * i + 2], past[4 * i + 3], self.traced)
        outputs = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
            attention_mask=encoder_attention_mask,
            decoder_input_ids=decoder_input_ids,
            past_key_values=cache,
            use_cache=True,
            return_dict=True,
            **kwargs,
        )
        cache = outputs.past_key_values if hasattr(outputs, "past_key_values") else outputs.cache
        if indirect:
            return (outputs.logits[:, -1, :], *buffered_tensors(cache))
        if self.with_past:
            return (outputs.logits[:, -1, :], *appended_tensors(cache))
        present = []
        for i in range(self.layout.decoder_layers):
            own, cross = cache.self_attention_cache.layers[i], cache.cross_attention_cache.layers[i]
            present += [own.keys, own.values, cross.keys, cross.values]
        return (outputs.logits[:, -1, :], *present)


# ---------------------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------------------


def ordinary_ids(vocab_size: int, special: set, generator: torch.Generator):
    """A sampler of (rows, columns) ids of a vocabulary of `vocab_size` that avoids the `special` ids wherever they
    sit (a stock OPUS-MT checkpoint has `</s>` at 0 and `<pad>` at the last id; xlpe's tokenizers `<pad>` at 0)."""
    allowed = torch.tensor([i for i in range(vocab_size) if i not in special])
    if not len(allowed):
        raise ValueError(f"a vocabulary of {vocab_size} ids has no id besides the special ones {sorted(special)}")
    return lambda rows, columns: allowed[torch.randint(len(allowed), (rows, columns), generator=generator)]


def example_inputs(model, layout: GraphLayout, batch: int = 2, source: int = 7, target: int = 3):
    """Tensors to trace with (shapes only matter: every axis but the model's widths is dynamic)."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    special = {config.pad_token_id, config.eos_token_id, getattr(config, "decoder_start_token_id", None)}
    shared = getattr(config, "share_encoder_decoder_embeddings", True)
    source_ids = ordinary_ids(config.vocab_size, special, generator)
    target_ids = ordinary_ids(config.vocab_size if shared else config.decoder_vocab_size, special, generator)
    input_ids = source_ids(batch, source)
    input_ids[:, -1] = config.eos_token_id
    mask = torch.ones_like(input_ids)
    encoder = [input_ids, mask]
    if layout.reorder_positions:
        encoder.append(torch.arange(source).flip(0).expand(batch, source).contiguous())
    if layout.source_tags:
        encoder.append(torch.full_like(input_ids, 3))
    hidden = torch.randn(batch, source, config.d_model, generator=generator)
    decoder_ids = target_ids(batch, target)
    first = [decoder_ids, hidden, mask]
    step = [decoder_ids[:, -1:], hidden, mask]
    if layout.tagger_window:
        first.append(target_ids(batch, layout.tagger_window - 1 + target))
        step.append(target_ids(batch, layout.tagger_window))
    shape = (batch, layout.decoder_heads, None, layout.head_dim)
    own = target + 2 if layout.indirect_cache else target  # indirect: a buffer with room beyond the cached length
    for _ in range(layout.decoder_layers):
        for length in (own, own, source, source):
            step.append(torch.randn(*shape[:2], length, shape[3], generator=generator))
    if layout.indirect_cache:  # one beam a sentence: each reads its own row
        step.append(torch.zeros(batch, 1, target, dtype=torch.int64))
    return encoder, first, step


def _dynamic_axes(names: list[str], layout: GraphLayout) -> dict:
    axes = {}
    for name in names:
        if name.startswith(("past_key_values", "present")):
            per_sentence = name.startswith("past_key_values.") and ".encoder." in name
            rows = "sentences" if per_sentence else "batch"
            own = "capacity" if layout.indirect_cache and ".decoder." in name else "cache"
            axes[name] = {0: rows, 2: own if ".decoder." in name else "source"}
        elif name == "cache_indirection":
            axes[name] = {0: "sentences", 1: "beams", 2: "cache"}
        elif name in ("encoder_hidden_states", "last_hidden_state", "reorder_positions"):
            axes[name] = {0: "batch", 1: "source"}
        elif name == "logits":
            axes[name] = {0: "batch"}
        elif name == "decoder_input_ids":
            axes[name] = {0: "batch", 1: "target"}
        elif name == "tagger_input_ids":
            axes[name] = {0: "batch", 1: "tagger_window"}
        else:  # source-side per-token inputs
            axes[name] = {0: "batch", 1: "source"}
    return axes


def export_graphs(model, layout: GraphLayout, directory, opset: int = DEFAULT_OPSET) -> dict:
    """Write the three graphs of `model` (eval mode, input checks off) into `directory`; returns
    {file: {"inputs": [...], "outputs": [...]}}."""
    from pathlib import Path

    if not 14 <= opset <= 20:  # 14: the exporter's scaled_dot_product_attention; 20: what onnxruntime 1.2x runs fully
        raise ValueError(f"opset must be between 14 and 20, got {opset}")
    directory = Path(directory)
    encoder_inputs, first_inputs, step_inputs = example_inputs(model, layout)
    traced = TracedCaches()  # this call's: the step graph's cache layers and attention functions share it
    tagger = ["tagger_input_ids"] if layout.tagger_window else []
    specs = {
        ENCODER_FILE: (EncoderGraph(model, layout), encoder_inputs, layout.encoder_inputs, layout.encoder_outputs),
        DECODER_FILE: (
            DecoderGraph(model, layout, with_past=False),
            first_inputs,
            ["decoder_input_ids", "encoder_hidden_states", "encoder_attention_mask", *tagger],
            ["logits", *layout.cache_names("present")],
        ),
        DECODER_WITH_PAST_FILE: (
            DecoderGraph(model, layout, with_past=True, traced=traced),
            step_inputs,
            [
                "decoder_input_ids",
                "encoder_hidden_states",
                "encoder_attention_mask",
                *tagger,
                *layout.cache_names("past_key_values"),
                *(["cache_indirection"] if layout.indirect_cache else []),
            ],
            ["logits", *layout.cache_names("present", sides=("decoder",))],
        ),
    }
    register_symbolics(opset)
    written, fastpath = {}, torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # nn.TransformerEncoder's fused op has no ONNX form
    try:
        with exportable_attention(model), appended_cache_attention(traced):
            _export_all(specs, directory, opset, written, layout)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return written


def _export_all(specs: dict, directory, opset: int, written: dict, layout: GraphLayout) -> None:
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values taken from shapes
        for file_name, (module, inputs, input_names, output_names) in specs.items():
            torch.onnx.export(
                module,
                tuple(inputs),
                str(directory / file_name),
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=_dynamic_axes(input_names + output_names, layout),
                opset_version=opset,
                dynamo=False,
                do_constant_folding=True,
                # the indirect step graph: onnxruntime's attention kernel (step_caches.py)
                custom_opsets={"com.microsoft": 1}
                if layout.indirect_cache and file_name == DECODER_WITH_PAST_FILE
                else None,
            )
            fix_graph(directory / file_name)
            written[file_name] = {"inputs": input_names, "outputs": output_names}


__all__ = [
    "DECODER_FILE",
    "DECODER_WITH_PAST_FILE",
    "DEFAULT_OPSET",
    "ENCODER_FILE",
    "GRAPH_FILES",
    "DecoderGraph",
    "EncoderGraph",
    "GraphLayout",
    "SELF_ATTENTION_CACHES",
    "export_graphs",
    "graph_layout",
]
