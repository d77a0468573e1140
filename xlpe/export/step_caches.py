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
  unchanged) and remembers which past and new tensors each returned tensor joins; `held_layer` holds the
  cross-attention keys and values as given (per sentence);
* `appended_cache_attention()` lets the attention functions that the models call (transformers'
  `ALL_ATTENTION_FUNCTIONS` "sdpa" and "eager") compute `split_attention` when their keys and values are such a
  concatenation, `shared_attention` when they are held per sentence, and the plain form otherwise. The
  concatenation then feeds nothing and is dropped from the graph; the numbers are the same up to float rounding
  (the export tests compare every family's tokens with PyTorch's `generate`).

An attention that reads the joined keys itself (relative position values: `PositionAwareSelfAttention`'s eager
path) keeps its in-graph concatenation: the graph is still right, only not faster. The first step's graph
(`decoder_model.onnx`) gives the whole cache of its prompt as before, one row per beam; the caller keeps each
sentence's first row of its cross-attention part (runtime.py). `GraphLayout.appended_cache` and
`cross_cache_per_sentence` record the form in the manifest (format 3); a format-2 export (grown cache, cross-attention
cache per beam) is read as it was written.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers.cache_utils import DynamicLayer

# id(joined tensor) -> (joined, past, new), filled while tracing inside `appended_cache_attention`
_JOINED: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
# id(tensor) -> tensor: cross-attention keys/values held one row per sentence (`held_layer(..., per_sentence=True)`)
_PER_SENTENCE: dict[int, torch.Tensor] = {}


def held_layer(keys: torch.Tensor, values: torch.Tensor, per_sentence: bool = False) -> DynamicLayer:
    """A `DynamicLayer` holding `keys` and `values` as given. (Built from tensors, transformers' caches `update` an
    empty layer, which traces as a one-input `Concat`: a copy of the cross-attention cache in every step.)
    `per_sentence`: cross-attention keys and values with one row per sentence, shared by its beams (the queries'
    rows are sentence-major: sentence 0's beams first), attended by `shared_attention`."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    if per_sentence:
        _PER_SENTENCE[id(keys)], _PER_SENTENCE[id(values)] = keys, values
    return layer


class AppendedKeysLayer(DynamicLayer):
    """A self-attention cache layer holding the given past; `update` joins the step's keys and values to it as
    `DynamicLayer` does, records the parts of what it returns, and keeps the step's own in `appended`."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values
        self.appended: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        past_keys, past_values = self.keys, self.values
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        self.appended = (key_states, value_states)
        _JOINED[id(keys)] = (keys, past_keys, key_states)
        _JOINED[id(values)] = (values, past_values, value_states)
        return keys, values


def _parts(tensor: torch.Tensor):
    entry = _JOINED.get(id(tensor))
    return entry[1:] if entry is not None and entry[0] is tensor else None


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


def _splitting(original):
    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        keys, values = _parts(key), _parts(value)
        if not dropout and _PER_SENTENCE.get(id(key)) is key and _PER_SENTENCE.get(id(value)) is value:
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
def appended_cache_attention():
    """While tracing: the "sdpa" and "eager" attention functions compute the split form for keys and values that
    an `AppendedKeysLayer` joined (module docstring); restored on exit."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.marian.modeling_marian import eager_attention_forward

    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    saved = {name: local[name] for name in ("sdpa", "eager") if name in local}
    originals = {
        "sdpa": saved.get("sdpa", sdpa_attention_forward),
        "eager": saved.get("eager", eager_attention_forward),
    }
    try:
        for name, original in originals.items():
            ALL_ATTENTION_FUNCTIONS[name] = _splitting(original)
        yield
    finally:
        for name in originals:
            if name in saved:
                local[name] = saved[name]
            else:
                local.pop(name, None)
        _JOINED.clear()
        _PER_SENTENCE.clear()


def appended_tensors(cache) -> list[torch.Tensor]:
    """The step's own keys and values of every self-attention layer of `cache` (an `EncoderDecoderCache` whose
    self-attention layers are `AppendedKeysLayer`s), in the graph's output order."""
    tensors = []
    for layer in cache.self_attention_cache.layers:
        tensors += list(layer.appended)
    return tensors


__all__ = [
    "AppendedKeysLayer",
    "held_layer",
    "shared_attention",
    "appended_cache_attention",
    "appended_tensors",
    "split_attention",
]
