"""Is the depth failure of the short recipe transformers' Marian, or post-LN Transformers at that schedule?
(docs/benchmarks/depth_and_init.md.)

    OMP_NUM_THREADS=1 python bench/studies/depth_check.py                          # 2+2, 6+2, 6+6; marian and torch
    OMP_NUM_THREADS=1 python bench/studies/depth_check.py --depths 6+6 --norm_first # pre-LN torch (marian is post-LN
    only)

Trains, side by side and on identical batches, stock `MarianMTModel` and a plain `torch.nn.Transformer` made to
match it: same width, heads, FFN, GELU, dropout, sinusoidal positions, embeddings scaled by sqrt(d), tied output,
every weight N(0, d^-1/2) like HF's init_std, AdamW, linear warm-up and decay, gradient clipping at 1. The data
is the built-in synthetic corpus (xlpe.synthetic), word-level ids, so no tokenizer is involved. The report is
the teacher-forced validation loss, and how much it rises when each sentence gets another sentence's source
(shuffled-source gap, in nats). A model that ignores the source has a gap near 0.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch
from torch import nn
from transformers import MarianConfig, MarianMTModel

from xlpe.features.synthetic import generate_pairs
from xlpe.models.sinusoid import sinusoid_table  # the one sinusoid table of the package

PAD, BOS, EOS = 0, 1, 2
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # nn.Transformer's eval fast path


def encode(pairs, vocab: dict[str, int], side: str, length: int) -> torch.Tensor:
    rows = [[vocab.setdefault(w, len(vocab)) for w in getattr(p, side).split()][: length - 1] + [EOS] for p in pairs]
    return torch.tensor([r + [PAD] * (length - len(r)) for r in rows])


class TorchSeq2Seq(nn.Module):
    """nn.Transformer with Marian's embedding recipe; `norm_first` switches it to pre-LN."""

    def __init__(
        self, vocab: int, d_model: int, heads: int, ffn: int, encoder_layers: int, decoder_layers: int, norm_first: bool
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.register_buffer("positions", sinusoid_table(256, d_model), persistent=False)
        self.core = nn.Transformer(
            d_model,
            heads,
            encoder_layers,
            decoder_layers,
            ffn,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
            norm_first=norm_first,
        )
        self.scale = math.sqrt(d_model)
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.normal_(parameter, 0.0, d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()

    def embed_with_positions(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids) * self.scale + self.positions[: ids.shape[1]]

    def forward(self, source: torch.Tensor, decoder_input: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(decoder_input.shape[1], dtype=torch.bool)
        hidden = self.core(
            self.embed_with_positions(source),
            self.embed_with_positions(decoder_input),
            tgt_mask=causal,
            src_key_padding_mask=source == PAD,
            memory_key_padding_mask=source == PAD,
            tgt_key_padding_mask=decoder_input == PAD,
            tgt_is_causal=True,
        )
        return hidden @ self.embed.weight.T


def build(
    backend: str, vocab: int, d_model: int, encoder_layers: int, decoder_layers: int, norm_first: bool
) -> nn.Module:
    heads, ffn = 4, 2 * d_model
    if backend == "torch":
        return TorchSeq2Seq(vocab, d_model, heads, ffn, encoder_layers, decoder_layers, norm_first)
    config = MarianConfig(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        dropout=0.1,
        scale_embedding=True,
        init_std=d_model**-0.5,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        max_position_embeddings=256,
    )
    return MarianMTModel(config)


def logits(model: nn.Module, source: torch.Tensor, decoder_input: torch.Tensor) -> torch.Tensor:
    if isinstance(model, MarianMTModel):
        return model(input_ids=source, attention_mask=(source != PAD).long(), decoder_input_ids=decoder_input).logits
    return model(source, decoder_input)


def loss_of(model, source, target) -> torch.Tensor:
    decoder_input = torch.cat([torch.full_like(target[:, :1], BOS), target[:, :-1]], dim=1)
    scores = logits(model, source, decoder_input)
    return nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), target.reshape(-1), ignore_index=PAD)


def train(model, data, args) -> dict:
    source, target, val_source, val_target = data
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    warmup = args.warmup_steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / (args.steps - warmup)))
    )
    generator = torch.Generator().manual_seed(args.seed)
    started = time.time()
    model.train()
    for _ in range(args.steps):
        rows = torch.randint(0, len(source), (args.batch,), generator=generator)
        loss = loss_of(model, source[rows], target[rows])
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    model.eval()
    with torch.no_grad():
        real = loss_of(model, val_source, val_target).item()
        shuffled = loss_of(model, val_source.roll(1, dims=0), val_target).item()
    return dict(val_loss=real, gap=shuffled - real, seconds=time.time() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="2+2,6+2,6+6", help="comma-separated encoder+decoder layers")
    parser.add_argument("--backends", default="marian,torch")
    parser.add_argument("--norm_first", action="store_true", help="pre-LN torch model")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--warmup_steps", type=int, default=100)
    parser.add_argument("--train_pairs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    for depth in args.depths.split(","):
        if not all(part.isdigit() and int(part) > 0 for part in depth.split("+")) or depth.count("+") != 1:
            parser.error(f"--depths: {depth!r} is not ENCODER+DECODER layers, e.g. 6+2")
    if args.norm_first and "marian" in args.backends.split(","):
        parser.error("--norm_first applies to the torch backend only (MarianMTModel is post-LN): add --backends torch")
    pairs = generate_pairs(args.train_pairs + 500, seed=args.seed)
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS}
    columns = [
        encode(pairs[:-500], vocab, "source", 40),
        encode(pairs[:-500], vocab, "target", 40),
        encode(pairs[-500:], vocab, "source", 40),
        encode(pairs[-500:], vocab, "target", 40),
    ]
    print(
        f"lr {args.learning_rate}, warm-up {args.warmup_steps}, {args.steps} steps x {args.batch}, d={args.d_model}, "
        f"{'pre' if args.norm_first else 'post'}-LN torch; vocabulary {len(vocab)} words\n"
    )
    print("| layers | backend | val loss | shuffled-source gap (nats) | seconds |\n|---|---|---|---|---|")
    for depth in args.depths.split(","):
        encoder_layers, decoder_layers = map(int, depth.split("+"))
        for backend in args.backends.split(","):
            torch.manual_seed(args.seed)
            model = build(backend, len(vocab), args.d_model, encoder_layers, decoder_layers, args.norm_first)
            result = train(model, columns, args)
            print(
                f"| {depth} | {backend} | {result['val_loss']:.3f} | {result['gap']:.3f} | {result['seconds']:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
