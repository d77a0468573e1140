"""The standalone test-time reorderer: predicts the BTG preorder of a source sentence from the source alone.

The XL PE paper (Ding et al. 2020, Sec. 4) decodes with positions from a BTG preordering parser trained on the
oracle orders (lader, Neubig et al. 2012). This model plays that part as a neural pairwise scorer over words,
decoded exactly over BTG trees:

    h      = TransformerEncoder_tok(E[x] * sqrt(d) + PE_abs)                      contextual sub-word states
    w_a    = TransformerEncoder_word(mean of h over the pieces of word a)        one vector per whitespace word
    l[a,c] = f(a, c) - f(c, a),   f(a, c) = q(w_a) . k(w_c) / sqrt(p) + bias[bucket(c - a)]     (biaffine)
                                  or  f(a, c) = v . gelu(q(w_a) + k(w_c)) + bias[bucket(c - a)]   (pair_scorer="mlp")
             (log-odds that word a precedes word c in target order; antisymmetric by construction)
    score(π) = sum_{a<c} log sigmoid(+-l[a, c]), the sign given by the order π puts a and c in
    loss   = mean over word pairs a < c of BCE(l[a, c], [oracle_a < oracle_c])        (training_loss="pairwise")
           or sum over sentences of (log Z - score(oracle)) / number of word pairs         (training_loss="btg_crf":
              a CRF over BTG permutations, Z = sum over BTG π of exp score(π), btg_chart.btg_log_partition)
           or the two summed                                                             ("pairwise+btg_crf")
    order  = argmax over BTG permutations of score(π)                               (btg_chart.py, exact CKY)

`decoder="rank"` replaces the CKY by sorting the words by their expected rank sum_c sigmoid(l[c, a]) (a
second design, compared in docs/benchmarks/reorderer.md; its output is a permutation but not necessarily BTG-reachable).

Words are the whitespace words of the oracle: a word is a word-start token (the `WordStarts` table, filled from
the tokenizer) and the movable non-start tokens after it; EOS, pad and `fixed_token_ids` keep their place. Its
token positions (`predict_positions`) keep every word's pieces together and in order, so an XL PE encoder can
use them directly; `word_positions` gives the word-level order for the CLI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from .btg_chart import btg_decode, btg_log_partition, order_scores
from .configuration_reorderer import XLPEReordererConfig
from .reorder_predictor import WordStarts, positions_from_scores
from .sinusoid import sinusoid_table

CRF_ROWS_PER_CHUNK = 16  # btg_crf: the inside pass runs on chunks of rows of similar length (memory ~ rows x n^3)


@dataclass
class ReordererOutput(ModelOutput):
    """`pair_logits` [B, W, W]: log-odds that word a precedes word c; `word_counts` [B]; `loss` when oracle
    positions were given; `unreachable_oracles`: rows whose oracle order is no BTG permutation (left out of the CRF
    term; always 0 on `xlpe-prepare` features, whose oracle is BTG by construction)."""

    loss: torch.FloatTensor | None = None
    pair_logits: torch.FloatTensor | None = None
    word_counts: torch.LongTensor | None = None
    unreachable_oracles: torch.LongTensor | None = None


def _encoder(config: XLPEReordererConfig, layers: int) -> nn.TransformerEncoder | None:
    if layers == 0:
        return None
    layer = nn.TransformerEncoderLayer(
        config.d_model,
        config.attention_heads,
        config.ffn_dim,
        config.dropout,
        activation="gelu",
        batch_first=True,
        norm_first=True,
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def word_keys(reorder_positions: torch.Tensor, slot: torch.Tensor, width: int) -> torch.Tensor:
    """[B, W] oracle key of each word: the smallest XL position of its pieces (`slot`: each token's word, `width`
    for fixed and pad tokens); sorting the keys gives the oracle word order."""
    big = torch.iinfo(torch.long).max
    oracle = torch.full((slot.shape[0], width + 1), big, dtype=torch.long, device=slot.device)
    oracle.scatter_reduce_(1, slot, reorder_positions.long(), reduce="amin")
    return oracle[:, :width]


class XLPEReordererPreTrainedModel(PreTrainedModel):
    config_class = XLPEReordererConfig
    config: XLPEReordererConfig
    base_model_prefix = "reorderer"
    main_input_name = "input_ids"

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, (XLPEReordererModel, WordStarts)):
            module.init_own_parameters()


class XLPEReordererModel(XLPEReordererPreTrainedModel):
    """Word-order predictor. `forward(input_ids, attention_mask, reorder_positions=oracle)` returns the pair
    logits and (with oracle positions) the loss; `predict_positions` returns token-level XL positions."""

    def __init__(self, config: XLPEReordererConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.register_buffer(
            "position_table", sinusoid_table(config.max_source_positions, config.d_model), persistent=False
        )
        self.dropout = nn.Dropout(config.dropout)
        self.token_encoder = _encoder(config, config.token_layers)
        self.word_encoder = _encoder(config, config.word_layers)
        self.final_norm = nn.LayerNorm(config.d_model)
        self.query = nn.Linear(config.d_model, config.pair_dim)
        self.key = nn.Linear(config.d_model, config.pair_dim)
        self.pair_output = nn.Linear(config.pair_dim, 1, bias=False) if config.pair_scorer == "mlp" else None
        self.distance_bias = nn.Embedding(2 * config.distance_buckets + 1, 1)
        self.word_starts = WordStarts(config.vocab_size)
        fixed = {config.eos_token_id, config.pad_token_id, *(config.fixed_token_ids or [])}
        self.fixed_token_ids = sorted(i for i in fixed if isinstance(i, int))
        self.register_buffer("fixed_ids", torch.tensor(self.fixed_token_ids, dtype=torch.long), persistent=False)
        self.post_init()

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        """Fill the non-persistent tables (also when this model sits inside an XL PE checkpoint)."""
        self.position_table.copy_(sinusoid_table(*self.position_table.shape))
        self.fixed_ids.copy_(torch.tensor(self.fixed_token_ids, dtype=torch.long))

    # --- words --------------------------------------------------------------------------------------------

    def words(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """(movable [B, T] bool, word index of each token [B, T] (-1 for fixed/pad), word counts [B])."""
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        movable = mask & ~torch.isin(input_ids, self.fixed_ids.to(input_ids.device))
        first = torch.cumsum(movable.long(), dim=1) == 1
        starts = (self.word_starts(input_ids) | first) & movable
        word = torch.cumsum(starts.long(), dim=1) - 1
        return movable, torch.where(movable, word, -1), starts.sum(dim=1)

    def check_lengths(self, input_ids: torch.Tensor, most_words: int) -> None:
        """ValueError naming the limit when an input is longer than the reorderer accepts."""
        if input_ids.shape[1] > self.config.max_source_positions:
            raise ValueError(
                f"input_ids has {input_ids.shape[1]} tokens; the reorderer accepts at most "
                f"max_source_positions={self.config.max_source_positions}"
            )
        if most_words > self.config.max_words:
            raise ValueError(
                f"an input has {most_words} words; the reorderer accepts at most max_words={self.config.max_words}"
            )

    # --- scoring ------------------------------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        reorder_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> ReordererOutput:
        r"""
        reorder_positions (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            oracle XL position of each token (the features `xlpe-prepare` writes); gives the training loss.
        """
        movable, word, counts = self.words(input_ids, attention_mask)
        most_words = int(counts.max()) if counts.numel() else 0  # one host sync per batch: sizes the word tensors
        self.check_lengths(input_ids, most_words)
        batch, length = input_ids.shape
        width = max(most_words, 1)
        hidden = self.embed_tokens(input_ids) * math.sqrt(self.config.d_model) + self.position_table[:length]
        hidden = self.dropout(hidden)
        pad = ~(attention_mask.bool() if attention_mask is not None else torch.ones_like(movable))
        if self.token_encoder is not None:
            hidden = self.token_encoder(hidden, src_key_padding_mask=pad)
        # mean of each word's pieces (fixed and pad tokens go to a dropped slot `width`)
        slot = torch.where(movable, word, width)
        sums = hidden.new_zeros(batch, width + 1, hidden.shape[-1]).scatter_add_(
            1, slot[..., None].expand_as(hidden), hidden
        )
        pieces = hidden.new_zeros(batch, width + 1).scatter_add_(1, slot, movable.to(hidden.dtype))
        words = (sums / pieces.clamp(min=1)[..., None])[:, :width]
        word_mask = torch.arange(width, device=input_ids.device)[None, :] < counts[:, None]
        if self.word_encoder is not None:
            words = self.word_encoder(words, src_key_padding_mask=~word_mask)
        words = self.final_norm(words)
        logits = self.pair_logits(words)
        loss = unreachable = None
        if reorder_positions is not None:
            loss, unreachable = self.order_loss(logits, reorder_positions, slot, width, word_mask, counts)
        return ReordererOutput(loss=loss, pair_logits=logits, word_counts=counts, unreachable_oracles=unreachable)

    def pair_logits(self, words: torch.Tensor) -> torch.Tensor:
        """[B, W, d] word vectors -> [B, W, W] antisymmetric log-odds l[a, c] that a precedes c."""
        width = words.shape[1]
        query, key = self.query(words), self.key(words)
        if self.pair_output is None:
            f = query @ key.transpose(1, 2) / math.sqrt(self.config.pair_dim)
        else:  # [B, W, W, p] hidden: small next to the token encoder at sentence lengths
            f = self.pair_output(F.gelu(query[:, :, None, :] + key[:, None, :, :])).squeeze(-1)
        index = torch.arange(width, device=words.device)
        buckets = self.config.distance_buckets
        distance = (index[None, :] - index[:, None]).clamp(-buckets, buckets) + buckets
        f = f + self.distance_bias(distance).squeeze(-1)
        return (f - f.transpose(1, 2)).float()

    def order_loss(self, logits, reorder_positions, slot, width, word_mask, counts):
        """(training loss, number of rows whose oracle is not BTG-reachable). A word's oracle key is the smallest XL
        position of its pieces (a word's pieces are contiguous in the oracle)."""
        oracle = word_keys(reorder_positions, slot, width)
        pairs = torch.triu(word_mask[:, :, None] & word_mask[:, None, :], diagonal=1)
        before = oracle[:, :, None] < oracle[:, None, :]
        num_pairs = pairs.sum().clamp(min=1)
        loss = logits.new_zeros(())
        unreachable = torch.zeros((), dtype=torch.long, device=logits.device)
        if self.config.training_loss in ("pairwise", "pairwise+btg_crf"):
            losses = F.binary_cross_entropy_with_logits(logits, before.float(), reduction="none")
            loss = loss + (losses * pairs).sum() / num_pairs
        if self.config.training_loss in ("btg_crf", "pairwise+btg_crf"):
            with torch.no_grad():  # the oracle's own order as scores: decoding it gives it back iff it is BTG-reachable
                signs = (before.float() - before.transpose(1, 2).float()) * 10.0
                decoded = btg_decode(signs, counts)
                reachable = ((decoded[:, :, None] < decoded[:, None, :]) == before).logical_or(~pairs).all(dim=(1, 2))
            unreachable = (~reachable).sum()
            log_z = btg_log_partition(logits, counts, rows_per_chunk=CRF_ROWS_PER_CHUNK)
            nll = log_z - order_scores(logits, before, pairs)
            loss = loss + torch.where(reachable, nll, torch.zeros_like(nll)).sum() / num_pairs
        return loss, unreachable

    # --- decoding -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def word_positions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """([B, W] XL position of each word (slots past a row's word count keep their index), [B] word counts)."""
        out = self.forward(input_ids, attention_mask)
        return self.decode(out.pair_logits, out.word_counts), out.word_counts

    @torch.no_grad()
    def decode(self, logits: torch.Tensor, counts: torch.Tensor, order_prior: float | None = None) -> torch.Tensor:
        """[B, W] XL position of each word from pair log-odds (`forward`'s `pair_logits`), decoded with the
        config's decoder; `order_prior` (default: the config's) is added to every "keep in source order" log-odds."""
        prior = self.config.order_prior if order_prior is None else order_prior
        if prior:  # l[a, c] (a < c) is "keep a before c": shift every pair toward the source order
            upper = torch.triu(torch.ones_like(logits, dtype=torch.bool), diagonal=1)
            logits = logits + prior * (upper.to(logits.dtype) - upper.transpose(1, 2).to(logits.dtype))
        if self.config.decoder == "btg":
            return btg_decode(logits, counts)
        width = logits.shape[1]
        valid = torch.arange(width, device=logits.device)[None, :] < counts[:, None]
        expected_rank = (torch.sigmoid(logits) * valid[:, :, None]).sum(dim=1)  # sum_c P(c before a)
        index = torch.arange(width, device=logits.device).expand_as(expected_rank)
        expected_rank = torch.where(valid, expected_rank, width + index.float())
        order = torch.sort(expected_rank, dim=1, stable=True).indices
        return torch.empty_like(order).scatter_(1, order, index.contiguous())

    @torch.no_grad()
    def predict_positions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, T] token-level XL positions: the predicted word order with each word's pieces together and in
        order; fixed and pad tokens keep their index (same contract as `reorder_positions`)."""
        word_pos, _ = self.word_positions(input_ids, attention_mask)
        movable, word, _ = self.words(input_ids, attention_mask)
        scores = word_pos.gather(1, word.clamp(min=0)).float()
        return positions_from_scores(scores, movable)


# with the Auto classes and for Hub custom code (save_pretrained writes auto_map and copies the code files)
XLPEReordererModel.register_for_auto_class("AutoModel")
if not __name__.startswith("transformers_modules."):  # remote code leaves the Auto classes to transformers
    AutoModel.register(XLPEReordererConfig, XLPEReordererModel, exist_ok=True)


__all__ = ["ReordererOutput", "XLPEReordererModel", "XLPEReordererPreTrainedModel", "word_keys"]
