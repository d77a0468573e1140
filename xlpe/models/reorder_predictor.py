"""Predicting XL positions from the source alone (XL PE paper, Sec. 4: "at decoding phase, we only provide
source sentences as input and the model can output reordering indices").

The paper obtains test-time reorderings from an external BTG preordering parser (lader, Neubig et al. 2012)
trained on the oracle orders. A checkpoint of this package carries its own small predictor instead, so it
translates raw text with no external tool:

    scores = Linear(TransformerEncoder(Linear(detach(X + PE_abs))))        # one real number per token
    word score = mean of its tokens' scores   (reorder_unit="word", the default; "token": no averaging)
    XL position of token i = rank of its (word) score among the movable tokens    # a valid permutation

With word scores a word's sub-words keep together and in order, as in the oracle; ranked per token, the
predictor split 79 % of the multi-piece words of an en-ja test set (docs/benchmarks/reorderer.md, "The in-model
reorderer"). Word starts come from the tokenizer (`WordStarts`, set by `xlpe-train`).

It is trained by imitation of the oracle BTG order whenever `reorder_positions` are given with `labels`:

* "pairwise" (default): logistic ranking loss over all ordered pairs of movable tokens,
  mean over pairs of softplus(s_i - s_j) for every pair with xl_i < xl_j (a smooth surrogate of Kendall's tau);
* "mse": regression of s_i onto the normalised oracle rank xl_i / (n - 1).

Special tokens (EOS, pad, `reorder_fixed_token_ids`) are not movable: they keep their own index, as in the
oracle (see `xlpe.features.reordering`). Ranking is vectorised (one argsort per batch); the pairwise loss costs
O(batch x length^2) memory, which is small next to attention. Departure from the paper (documented in
docs/xl_pe.md): a ranking network rather than a BTG parser, so the predicted order is a permutation but not
necessarily BTG-reachable.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ReorderPredictor(nn.Module):
    """Scores each source token; ranks of the scores are the predicted XL positions."""

    def __init__(
        self,
        d_model: int,
        hidden_size: int,
        num_layers: int,
        num_heads: int,
        dropout: float,
        ffn_size: int | None = None,
    ):
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(
                f"reorder_predictor_hidden_size ({hidden_size}) must be divisible by "
                f"reorder_predictor_heads ({num_heads})"
            )
        self.input_proj = nn.Linear(d_model, hidden_size)
        ffn_size = 4 * hidden_size if ffn_size is None else ffn_size
        layer = nn.TransformerEncoderLayer(
            hidden_size, num_heads, ffn_size, dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.final_norm = nn.LayerNorm(hidden_size)
        self.score = nn.Linear(hidden_size, 1)

    @classmethod
    def from_config(cls, config) -> ReorderPredictor:
        """The predictor an XL PE config describes (its `reorder_predictor_*` fields)."""
        return cls(
            config.d_model,
            config.reorder_predictor_hidden_size,
            config.reorder_predictor_layers,
            config.reorder_predictor_heads,
            config.reorder_predictor_dropout,
            config.reorder_predictor_ffn_size,
        )

    def forward(self, position_aware_embeddings: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """[batch, len, d_model] embeddings (+ absolute PE), [batch, len] bool mask → [batch, len] scores."""
        hidden = self.input_proj(position_aware_embeddings)
        if len(self.encoder.layers) > 0:  # reorder_predictor_layers=0: linear scorer (TransformerEncoder needs >= 1)
            keys = key_padding_bias(token_mask)
            for layer in self.encoder.layers:
                hidden = pre_norm_layer_forward(layer, hidden, keys)
        return self.score(self.final_norm(hidden)).squeeze(-1).float()


def key_padding_bias(token_mask: torch.Tensor) -> torch.Tensor:
    """[batch, 1, 1, len] bool: which keys a query may attend to (SDPA's boolean `attn_mask`). A row with no real
    token lets every key through, so no softmax row is empty (nn.MultiheadAttention gives such rows zeros; here
    they are pad rows whose scores nothing reads)."""
    return (token_mask | ~token_mask.any(dim=1, keepdim=True))[:, None, None, :]


def pre_norm_layer_forward(layer: nn.TransformerEncoderLayer, hidden: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """What `nn.TransformerEncoderLayer(norm_first=True, batch_first=True)` computes, on its own parameters:

        x = x + dropout(MHA(LN1(x)));   x = x + dropout(W2 dropout(act(W1 LN2(x))))

    written as one packed Q/K/V projection and `predictor_attention` (SDPA's function; attention dropout as its
    `dropout_p`). Same parameters (so checkpoints and their state-dict keys are unchanged) and the same function
    (equal to the module's output in eval mode; a test checks it), with a third fewer autograd nodes than
    `nn.MultiheadAttention`'s general path (input checks, mask merging, per-call reshapes): the predictor runs at
    every training step of a small model, where those small ops are most of its cost (docs/benchmarks/speed.md,
    CPU train-step ratio). The reshapes are batch-agnostic, so the ONNX exporter traces it with dynamic axes."""
    attention = layer.self_attn
    batch, length, width = hidden.shape
    heads = attention.num_heads
    dropout = layer.dropout.p if layer.training else 0.0
    normed = layer.norm1(hidden)
    qkv = F.linear(normed, attention.in_proj_weight, attention.in_proj_bias)
    q, k, v = qkv.view(batch, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4).unbind(0)
    attended = predictor_attention(q, k, v, keys, attention.dropout if layer.training else 0.0)
    attended = attention.out_proj(attended.transpose(1, 2).reshape(batch, length, width))
    hidden = hidden + dropout_fast_on_cpu(attended, dropout, layer.training)
    inner = dropout_fast_on_cpu(layer.activation(layer.linear1(layer.norm2(hidden))), dropout, layer.training)
    return hidden + dropout_fast_on_cpu(layer.linear2(inner), dropout, layer.training)


# CPU, 2 threads, 32 sentences x 4 heads of width 16, forward + backward, ms written out / SDPA
# (bench/studies/predictor_cost.py --attention-lengths): 12 tokens 0.75 / 0.64, 24: 1.04 / 1.80, 48: 2.26 / 3.80,
# 64: 3.30 / 5.06, 96: 5.53 / 7.98, 192: 23.6 / 22.6 (and 11.3 / 8.7 at 96 in another run): written out up to 64 tokens
WRITTEN_OUT_ATTENTION_MAX_LENGTH = 64


def predictor_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor, dropout_p: float
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head), keys masked) v, with dropout `dropout_p` on the attention weights: what
    `F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)` computes.

    On CPU in eager mode, for batches of up to `WRITTEN_OUT_ATTENTION_MAX_LENGTH` tokens, written out (two batched
    matmuls and a softmax over an additive mask): at the predictor's sizes (heads 8-32 wide, sentences of tens of
    tokens) CPU's flash-attention kernel costs up to twice as much forward + backward, and dropout sends SDPA to
    this same math path anyway (docs/benchmarks/speed.md, "The predictor's dropout and attention"). Longer
    batches, CUDA and compiled graphs: SDPA. `keys` never masks a whole row (`key_padding_bias`), so no softmax row
    is empty. The ONNX exporter traces one branch (the example's length): either is the same function."""
    if q.device.type != "cpu" or torch.compiler.is_compiling() or q.shape[-2] > WRITTEN_OUT_ATTENTION_MAX_LENGTH:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)
    bias = torch.zeros(keys.shape, dtype=q.dtype, device=q.device).masked_fill_(~keys, float("-inf"))
    weights = torch.softmax(torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2)) + bias, dim=-1)
    if dropout_p > 0.0:
        weights = weights * keep_mask(weights, dropout_p)
    return torch.matmul(weights, v)


def keep_mask(like: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted-dropout mask shaped like `like`: 1 / (1 - p) with probability 1 - p, else 0 (in `like`'s dtype).

    On CPU in eager mode drawn as `uniform(0, 1) >= p` in float32 rather than with `bernoulli_`: the same
    distribution (to 2^-24), at about half the cost, where drawing the mask is most of dropout's time (2 threads,
    768 x 256 floats: bernoulli_ 1.17 ms, uniform_ 0.57 ms, the multiply 0.02 ms; docs/benchmarks/speed.md, "The
    host allocator"). Elsewhere (CUDA, a compiled graph) `bernoulli_`, as before."""
    if like.device.type != "cpu" or torch.compiler.is_compiling():
        return torch.empty_like(like).bernoulli_(1 - p) / (1 - p)
    return torch.rand(like.shape, device=like.device).ge_(p).mul_(1.0 / (1.0 - p)).to(like.dtype)


def dropout_fast_on_cpu(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout(x, p, training)`; on CPU in eager mode with the cheaper mask of `keep_mask` (CUDA's fused dropout
    kernel and a compiled graph's own dropout are faster than any mask built outside them: left to F.dropout)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, True)
    return x * keep_mask(x, p)


def positions_from_scores(scores: torch.Tensor, movable: torch.Tensor) -> torch.Tensor:
    """Turn scores into XL positions: movable tokens are ranked by score and take the movable slots in order.

    Non-movable tokens (special, pad) keep their own index. For every row the result is a permutation of
    0..T-1, and its restriction to real tokens is a permutation of their indices. Ties are broken by the
    original index (stable sort), so equal scores give the monotone order.
    """
    batch, length = scores.shape
    index = torch.arange(length, device=scores.device).expand(batch, length)
    big = torch.finfo(scores.dtype).max
    # movable tokens first, in score order; the rest after, in index order
    order = torch.sort(scores.masked_fill(~movable, big), dim=1, stable=True).indices
    slots = torch.sort(index.masked_fill(~movable, length), dim=1).values  # movable indices ascending, then `length`
    positions = torch.empty_like(index)
    positions.scatter_(1, order, slots)
    return torch.where(movable, positions, index)


class WordStarts(nn.Module):
    """Which token ids begin a whitespace word (a vocabulary-sized table saved with the weights), so the
    predictor can rank whole words. Until the tokenizer's table is set (`set_from`; `xlpe-train` does it), every
    token counts as a word start: ranking is per token, as in checkpoints made before the table existed.

    Stored as uint8 (1 = begins a word), not bool: transformers' own save/load tests, and tools that read a state
    dict, expect no bool tensors in a model's state (stock models keep none). Checkpoints that saved a bool table
    load into it unchanged (the values copy across dtypes); `forward` gives the bool lookup."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.register_buffer("flags", torch.ones(vocab_size, dtype=torch.uint8))

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        self.flags.fill_(1)

    @torch.no_grad()
    def set_from(self, flags) -> None:
        flags = torch.as_tensor(flags, dtype=torch.bool, device=self.flags.device)
        if flags.shape != self.flags.shape:
            raise ValueError(
                f"word-start flags must have one entry per vocabulary id ({self.flags.shape[0]}), "
                f"got {tuple(flags.shape)}"
            )
        self.flags.copy_(flags)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Bool tensor shaped like `input_ids`: True where the token begins a word."""
        return self.flags[input_ids].bool()


def word_mean_scores(scores: torch.Tensor, word_start: torch.Tensor, movable: torch.Tensor) -> torch.Tensor:
    """Every movable token's score replaced by the mean score of its word: a word is a word-start token and the
    movable non-start tokens after it (the first movable token always starts one). Ranked by
    `positions_from_scores` (stable), a word's pieces then stay together and in their order, as in the oracle
    (whose pieces always move together). Vectorised: a scatter-add per batch, no host sync."""
    index = torch.arange(scores.shape[1], device=scores.device)
    starts = (word_start | (index == 0)) & movable
    word = (torch.cumsum(starts.long(), dim=1) - 1).clamp(min=0)
    weight = movable.to(scores.dtype)
    sums = torch.zeros_like(scores).scatter_add_(1, word, scores * weight)
    counts = torch.zeros_like(scores).scatter_add_(1, word, weight)
    return torch.where(movable, (sums / counts.clamp(min=1)).gather(1, word), scores)


def reorder_loss(
    scores: torch.Tensor, oracle_positions: torch.Tensor, movable: torch.Tensor, kind: str
) -> torch.Tensor:
    """Imitation loss of the predictor against the oracle XL positions (mean over pairs or tokens)."""
    oracle = oracle_positions.to(scores.dtype)
    if kind == "pairwise":
        # pair (i, j) counts when both are movable and the oracle puts i before j: want s_i < s_j
        before = (oracle[:, :, None] < oracle[:, None, :]) & movable[:, :, None] & movable[:, None, :]
        margins = scores[:, :, None] - scores[:, None, :]
        pair_count = before.sum().clamp(min=1)
        return (F.softplus(margins) * before).sum() / pair_count
    if kind == "mse":
        # normalise the oracle rank among movable tokens to [0, 1]
        ranks = torch.argsort(torch.argsort(oracle.masked_fill(~movable, float("inf")), dim=1), dim=1).to(scores.dtype)
        count = movable.sum(dim=1, keepdim=True).clamp(min=2).to(scores.dtype)
        target = ranks / (count - 1)
        return ((scores - target) ** 2 * movable).sum() / movable.sum().clamp(min=1)
    raise ValueError(f"reorder_loss kind must be 'pairwise' or 'mse', got {kind!r}")
