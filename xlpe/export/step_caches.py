"""The step graph's caches, traced so that a decoding step copies neither of them: `decoder_with_past_model.onnx`
gives only the keys and values of this step's tokens (the caller appends them to the self-attention cache in the
copy that reorders it for the beams), and takes the cross-attention cache once per sentence, not once per beam.

Why: traced as the models run them, a decoder step (1) concatenates each layer's cached keys and values with the
new ones (`torch.cat` in the cache's `update`) and returns the grown cache, which the caller then copies again into
the beams' new order, and (2) reads cross-attention keys and values repeated for each of the b beams of a sentence
(the encoder states are repeated before the first step), one small product per beam. On an OPUS-MT-size model
(6 layers, beam 4, 16 sentences, int8) the in-graph `Concat` was a quarter of a step and the cross-attention reads
most of the rest of the attention. Neither is needed:

    softmax([q K_past^T, q K_new^T] * s + mask) = [P_past, P_new],   output = P_past V_past + P_new V_new

(the scores of the cached and the new keys side by side: a few numbers per query, not the cache), and the b beams'
queries of one sentence attend to its keys and values in one product, [q_1; ...; q_b] K^T. So, while the exporter
traces the step graph:

* `AppendedKeysLayer`, a transformers `DynamicLayer` that still returns the concatenation (the models' code is
  unchanged) and records which past and new tensors each returned tensor joins; `held_layer` holds the
  cross-attention keys and values as given (per sentence) and records them so. The records live in the export
  call's `TracedCaches`, passed to the layers and to the attention functions, matched by identity (`is`) and
  dropped with the call;
* `appended_cache_attention(traced)` lets the attention functions that the models call (transformers'
  `ALL_ATTENTION_FUNCTIONS` "sdpa" and "eager") compute `split_attention` when their keys and values are such a
  concatenation, `shared_attention` when they are held per sentence, and the plain form otherwise. The
  concatenation then feeds nothing and is dropped from the graph; the numbers are the same up to float rounding
  (the export tests compare every family's tokens with PyTorch's `generate`).

An attention that reads the joined keys itself (relative position values: `PositionAwareSelfAttention`'s eager
path) keeps its in-graph concatenation: the graph is still right, only not faster. The first step's graph
(`decoder_model.onnx`) gives the whole cache of its prompt as before, one row per beam; the caller keeps each
sentence's first row of its cross-attention part (runtime.py). The manifest records this form as
`GraphLayout.self_attention_cache` "appended".

**The indirect cache: never copied** (`GraphLayout.self_attention_cache` "indirect"). Appending still left the
caller one copy of every self-attention cache a step to reorder it for the beams (memory-bound: a tenth of an int8
step at OPUS-MT size). onnxruntime's `DecoderMaskedMultiHeadAttention` (com.microsoft; CPU kernel) reads the cache
*through* the beams' history instead, as FasterTransformer does: each self-attention layer keeps a buffer [rows,
heads, capacity, head_dim] that the kernel writes the step's keys and values into in place (at position `length`,
buffer rows never move), and `cache_indirection` [sentences, beams, length] says, for each hypothesis and each
earlier position, which beam row of its sentence holds that position's keys:

    K_r[t] = buffer[s * b + indirection[s, j, t], :, t]   (r = s * b + j, t < length),   K_r[length] = the step's key

The caller updates only the indirection (ints, a few KB: runtime.py). `BufferedKeysLayer` holds a buffer and the
indirection while the step graph is traced; its length is the indirection's last axis (what the decoders read as
the cache's length: positions, masks); `indirect_self_attention` is the torch reference of the kernel and
`IndirectSelfAttention` emits the kernel into the graph. Only attentions the models call through transformers'
attention functions, without a bias of their own (relative or directional terms), can take this form
(`indirect_cache_supported`); the exporter writes the appended form for the others.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers.cache_utils import DynamicLayer

from .small_graphs import indirect_attention_available  # noqa: F401  (re-exported; no torch there)


class TracedCaches:
    """What the step graph's cache layers returned while one export call traces it, for the attention functions of
    `appended_cache_attention(traced)`: which keys/values join a past and a new part (`AppendedKeysLayer`), which
    are held once per sentence (`held_layer`), which stand for a `BufferedKeysLayer`. Tensors are found by identity
    (`is`), among the few dozen a trace records."""

    def __init__(self):
        self.joined: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (joined, past, new)
        self.per_sentence: list[torch.Tensor] = []
        self.buffered: list[tuple[torch.Tensor, BufferedKeysLayer]] = []  # (stand-in keys, their layer)

    def parts(self, tensor: torch.Tensor):
        """(past, new) of a joined tensor, else None."""
        return next((entry[1:] for entry in self.joined if entry[0] is tensor), None)

    def held_per_sentence(self, tensor: torch.Tensor) -> bool:
        return any(held is tensor for held in self.per_sentence)

    def buffered_layer(self, tensor: torch.Tensor) -> BufferedKeysLayer | None:
        return next((layer for stand_in, layer in self.buffered if stand_in is tensor), None)


def held_layer(keys: torch.Tensor, values: torch.Tensor, traced: TracedCaches) -> DynamicLayer:
    """A `DynamicLayer` holding `keys` and `values` as given. (Built from tensors, transformers' caches `update` an
    empty layer, which traces as a one-input `Concat`: a copy of the cross-attention cache in every step.) They are
    cross-attention keys and values with one row per sentence, shared by its beams (the queries' rows are
    sentence-major: sentence 0's beams first), attended by `shared_attention` (recorded in `traced`)."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    traced.per_sentence += [keys, values]
    return layer


class AppendedKeysLayer(DynamicLayer):
    """A self-attention cache layer holding the given past; `update` joins the step's keys and values to it as
    `DynamicLayer` does, records the parts of what it returns in `traced`, and keeps the step's own in `appended`."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, traced: TracedCaches):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values, self.traced = keys, values, traced
        self.appended: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        past_keys, past_values = self.keys, self.values
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        self.appended = (key_states, value_states)
        self.traced.joined += [(keys, past_keys, key_states), (values, past_values, value_states)]
        return keys, values


def split_attention(query, past_keys, new_keys, past_values, new_values, attention_mask, scaling, causal):
    """Attention of `query` (B, H, Lq, d) over the cached (B, H, Lp, d) and new (B, H, Lq, d) keys and values
    without joining them; the output as transformers' attention functions give it, (B, Lq, H, d). The mask (bool:
    True = attend, or additive; broadcastable to (B, H, Lq, Lp + Lq)) applies to the scores side by side; with none,
    `causal` masks later new tokens from earlier ones (each query sits at its own new token)."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    past_scores = torch.matmul(query, past_keys.transpose(-1, -2))
    # (B, H, Lq, 1, d) x (B, H, 1, Lq, d) summed over d: elementwise, cheaper than a batched matmul of 1 x 1 blocks
    new_scores = (query.unsqueeze(-2) * new_keys.unsqueeze(-3)).sum(-1)
    scores = torch.cat([past_scores, new_scores], dim=-1) * scaling
    minimum = torch.finfo(scores.dtype).min
    if attention_mask is not None:
        scores = _masked(scores, attention_mask)
    elif causal:  # each query at its own new token: keys after it are masked
        past = past_keys.shape[-2]
        key_positions = torch.arange(past + new_keys.shape[-2], device=query.device)
        query_positions = past + torch.arange(query.shape[-2], device=query.device)
        scores = scores.masked_fill(key_positions[None, :] > query_positions[:, None], minimum)
    weights = torch.softmax(scores, dim=-1)
    past_weights, new_weights = weights[..., : past_keys.shape[-2]], weights[..., past_keys.shape[-2] :]
    output = torch.matmul(past_weights, past_values) + (new_weights.unsqueeze(-1) * new_values.unsqueeze(-3)).sum(-2)
    return output.transpose(1, 2).contiguous()


def _masked(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return scores
    if mask.dtype == torch.bool:  # True = attend
        return scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores + mask


def shared_attention(query, keys, values, attention_mask, scaling):
    """Cross-attention of `query` (S x b rows, H, Lq, d; the b beams of each of S sentences together) over keys and
    values held once per sentence (S, H, Ls, d), without repeating them b times: each sentence's b x Lq queries
    attend in one product. The mask (bool or additive), per query row, broadcastable to (S x b, H, Lq, Ls). Output
    (S x b, Lq, H, d), as transformers' attention functions give it; the same numbers as the repeated form."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    sentences, heads, length, width = keys.shape[0], query.shape[1], query.shape[2], query.shape[3]
    grouped = query.reshape(sentences, -1, heads, length, width).transpose(1, 2).reshape(sentences, heads, -1, width)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)) * scaling  # (S, H, b x Lq, Ls)
    if attention_mask is not None:
        mask = attention_mask.expand(query.shape[0], heads, length, keys.shape[2])
        mask = mask.reshape(sentences, -1, heads, length, keys.shape[2]).transpose(1, 2)
        scores = _masked(scores, mask.reshape(sentences, heads, -1, keys.shape[2]))
    output = torch.matmul(torch.softmax(scores, dim=-1), values)  # (S, H, b x Lq, d)
    output = output.reshape(sentences, heads, -1, length, width).permute(0, 2, 3, 1, 4)
    return output.reshape(-1, length, heads, width)


def _splitting(original, traced: TracedCaches):
    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        layer = None if dropout else traced.buffered_layer(key)
        if layer is not None:  # indirect: the mask is causal only (one query, the last position, no target
            # padding: it masks nothing)
            scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
            output, layer.present_keys, layer.present_values = IndirectSelfAttention.apply(
                query, *layer.appended, layer.key_buffer, layer.value_buffer, layer.indirection, float(scaling)
            )
            return output, None
        keys, values = traced.parts(key), traced.parts(value)
        if not dropout and traced.held_per_sentence(key) and traced.held_per_sentence(value):
            return shared_attention(query, key, value, attention_mask, scaling), None
        if keys is None or values is None or dropout:
            if is_causal is not None:
                kwargs["is_causal"] = is_causal
            return original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
        causal = bool(getattr(module, "is_causal", False)) if is_causal is None else bool(is_causal)
        output = split_attention(query, keys[0], keys[1], values[0], values[1], attention_mask, scaling, causal)
        return output, None

    return attention


@contextmanager
def appended_cache_attention(traced: TracedCaches):
    """While tracing: the "sdpa" and "eager" attention functions compute the split, per-sentence and indirect forms
    for keys and values that the cache layers recorded in `traced` (module docstring); restored on exit. Through
    `ALL_ATTENTION_FUNCTIONS`' mapping interface only: setting a name overrides it for this mapping, deleting it
    drops that override and shows the library-wide registration again (`GeneralInterface`, checked against
    transformers 5.23.0 and 5.24.0); "eager" is registered nowhere (each model falls back to its own file's)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.marian.modeling_marian import eager_attention_forward

    before = {name: ALL_ATTENTION_FUNCTIONS.get(name) for name in ("sdpa", "eager")}
    fallbacks = {"sdpa": sdpa_attention_forward, "eager": eager_attention_forward}
    try:
        for name, found in before.items():
            ALL_ATTENTION_FUNCTIONS[name] = _splitting(found or fallbacks[name], traced)
        yield
    finally:
        for name, found in before.items():
            del ALL_ATTENTION_FUNCTIONS[name]
            if found is not None and ALL_ATTENTION_FUNCTIONS.get(name) is not found:  # an override of its own
                ALL_ATTENTION_FUNCTIONS[name] = found


# ---------------------------------------------------------------------------------------------------------
# The indirect cache: buffers written in place, read through the beams' history (module docstring)
# ---------------------------------------------------------------------------------------------------------


class BufferedKeysLayer(DynamicLayer):
    """A self-attention cache layer over a buffer [rows, heads, capacity, head_dim] whose first `length` positions
    are read through `indirection` [sentences, beams, length]. Its length (`get_seq_length`) is the indirection's
    last axis, so the decoder places the step's token at `length`; `update` keeps the step's keys and values and
    returns a stand-in, recorded in `traced`, that `appended_cache_attention`'s attention functions recognise (and
    that no graph node reads); the kernel's outputs, the written buffers, land in `present_keys` / `present_values`."""

    def __init__(self, key_buffer, value_buffer, indirection: torch.Tensor, traced: TracedCaches):
        super().__init__()
        self.lazy_initialization(key_buffer, value_buffer)
        self.key_buffer, self.value_buffer, self.indirection = key_buffer, value_buffer, indirection
        self.traced = traced
        self.keys, self.values = key_buffer, value_buffer
        self.appended: tuple[torch.Tensor, torch.Tensor] | None = None
        self.present_keys = self.present_values = None

    def get_seq_length(self, *args) -> int:
        return self.indirection.shape[-1]

    def get_mask_sizes(self, query_length: int, *args) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def update(self, key_states, value_states, *args, **kwargs):
        self.appended = (key_states, value_states)
        stand_in = key_states.expand(-1, -1, -1, -1)  # a view: attention functions see it, the graph drops it
        self.traced.buffered.append((stand_in, self))
        return stand_in, value_states


def indirect_self_attention(query, new_keys, new_values, key_buffer, value_buffer, indirection, scaling):
    """What `DecoderMaskedMultiHeadAttention` computes (torch, the module docstring's K_r): attention of `query`
    (B, H, 1, d; B = sentences x beams, sentence-major) over the buffered positions t < length, row
    s * b + indirection[s, j, t], and the step's own key; output (B, 1, H, d) as transformers' attention functions
    give it, and the buffers with the step's keys and values written at position `length`."""
    rows, heads, _, width = query.shape
    sentences, beams, length = indirection.shape
    sources = (torch.arange(sentences, device=query.device)[:, None, None] * beams + indirection).reshape(rows, length)
    positions = torch.arange(length, device=query.device)[None, :]
    keys = torch.cat([key_buffer[sources, :, positions].transpose(1, 2), new_keys], dim=2)  # (B, H, length + 1, d)
    values = torch.cat([value_buffer[sources, :, positions].transpose(1, 2), new_values], dim=2)
    weights = torch.softmax(torch.matmul(query, keys.transpose(-1, -2)) * scaling, dim=-1)
    output = torch.matmul(weights, values).transpose(1, 2).contiguous()
    present_keys, present_values = key_buffer.clone(), value_buffer.clone()
    present_keys[:, :, length] = new_keys[:, :, 0]
    present_values[:, :, length] = new_values[:, :, 0]
    return output, present_keys, present_values


class IndirectSelfAttention(torch.autograd.Function):
    """`indirect_self_attention` in PyTorch; one com.microsoft `DecoderMaskedMultiHeadAttention` node (buffers
    shared between past and present, `cache_indirection` padded to the buffer's capacity) in the exported graph."""

    @staticmethod
    def forward(ctx, query, new_keys, new_values, key_buffer, value_buffer, indirection, scaling):
        return indirect_self_attention(query, new_keys, new_values, key_buffer, value_buffer, indirection, scaling)

    @staticmethod
    def symbolic(g, query, new_keys, new_values, key_buffer, value_buffer, indirection, scaling):
        # the widths are the model's (static); the buffers' head axes give them
        heads, width = (int(size) for size in key_buffer.type().varyingSizes()[1::2])

        def const(values):
            return g.op("Constant", value_t=torch.tensor(values, dtype=torch.int64))

        def packed(x):  # (B, H, 1, d) -> (B, 1, H x d), the kernel's layout
            return g.op("Reshape", g.op("Transpose", x, perm_i=[0, 2, 1, 3]), const([0, 0, -1]))

        def dim(tensor, axis):  # int64 [1]
            return g.op("Slice", g.op("Shape", tensor), const([axis]), const([axis + 1]))

        length, beams, capacity = dim(indirection, 2), dim(indirection, 1), dim(key_buffer, 2)
        pads = g.op("Concat", const([0, 0, 0, 0, 0]), g.op("Sub", capacity, length), axis_i=0)
        int32 = torch.onnx.TensorProtoDataType.INT32
        full = g.op("Pad", g.op("Cast", indirection, to_i=int32), pads)
        none = g.op("prim::Constant")
        none.setType(torch._C.OptionalType.ofTensor())
        output, present_keys, present_values = g.op(
            "com.microsoft::DecoderMaskedMultiHeadAttention",
            packed(query),
            packed(new_keys),
            packed(new_values),
            none,  # mask_index: none (the step's causal mask masks nothing)
            none,  # attention_bias
            key_buffer,
            value_buffer,
            g.op("Cast", length, to_i=int32),
            g.op("Cast", beams, to_i=int32),
            full,
            num_heads_i=heads,
            past_present_share_buffer_i=1,
            scale_f=scaling,
            outputs=3,
        )
        # typed here: ONNX shape inference knows no com.microsoft op, and the quantizer needs every tensor's type
        output.setType(key_buffer.type().with_sizes([None, 1, heads * width]))
        present_keys.setType(key_buffer.type())
        present_values.setType(value_buffer.type())
        output = g.op("Reshape", output, const([0, 0, heads, width]))
        output.setType(key_buffer.type().with_sizes([None, 1, heads, width]))
        return output, present_keys, present_values


def buffered_tensors(cache) -> list[torch.Tensor]:
    """The written buffers of every self-attention layer of `cache` (`BufferedKeysLayer`s), in the graph's output
    order."""
    tensors = []
    for layer in cache.self_attention_cache.layers:
        if layer.present_keys is None:
            raise RuntimeError(
                f"a decoder self-attention of {type(layer).__name__} did not take the indirect-cache form: "
                "its attention does not go through transformers' attention functions (export the appended form instead)"
            )
        tensors += [layer.present_keys, layer.present_values]
    return tensors


def indirect_cache_supported(model) -> bool:
    """Whether every decoder self-attention of `model` can take the indirect form: stock attention (transformers'
    attention functions), no relative or directional terms of its own."""
    decoder = model.get_decoder()
    for layer in decoder.layers:
        attention = layer.self_attn
        if getattr(attention, "relative", None) is not None or getattr(attention, "directional", False):
            return False
        if getattr(attention, "alibi", None) is not None:  # a score bias of its own, as relative PE
            return False
    return True


def appended_tensors(cache) -> list[torch.Tensor]:
    """The step's own keys and values of every self-attention layer of `cache` (an `EncoderDecoderCache` whose
    self-attention layers are `AppendedKeysLayer`s), in the graph's output order."""
    tensors = []
    for layer in cache.self_attention_cache.layers:
        tensors += list(layer.appended)
    return tensors


__all__ = [
    "AppendedKeysLayer",
    "BufferedKeysLayer",
    "IndirectSelfAttention",
    "TracedCaches",
    "buffered_tensors",
    "indirect_attention_available",
    "indirect_cache_supported",
    "indirect_self_attention",
    "held_layer",
    "shared_attention",
    "appended_cache_attention",
    "appended_tensors",
    "split_attention",
]
