"""Training-step speed of every family, eager vs `torch.compile` (inductor), on a tiny CPU model.

    python bench/compile_training.py [--steps 20] [--d_model 64]

One step = forward with labels and the family's extra inputs + backward + AdamW step, batch 16 x 24 tokens.
Stock MarianMT and BART (same sizes, same batch) are timed the same way beside the families, so their speed-ups
compare. Prints a Markdown table (median step time after warm-up; the first compiled steps include compilation)."""

import argparse
import statistics
import time

import torch
from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

from xlpe.models.configuration_dpe import DPEMarianConfig
from xlpe.models.configuration_mvpe_pos import MvPEPosConfig
from xlpe.models.configuration_xlpe import XLPEMarianConfig
from xlpe.models.modeling_dpe import DPEMarianMTModel
from xlpe.models.modeling_mvpe_pos import MvPEPosForConditionalGeneration
from xlpe.models.modeling_xlpe import XLPEMarianMTModel


def family_setups(d_model, batch, length, vocab=256):
    common = dict(vocab_size=vocab, d_model=d_model, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
                  max_position_embeddings=64, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1, dropout=0.1)
    ids = torch.randint(3, vocab, (batch, length))
    labels = torch.randint(3, vocab, (batch, length))
    base = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    positions = torch.arange(length).flip(0).expand(batch, length).contiguous()
    tags = torch.randint(3, 6, (batch, length))
    bart = {**common, "pad_token_id": 1, "eos_token_id": 2, "bos_token_id": 0, "decoder_start_token_id": 2}
    return {
        "stock Marian": (MarianMTModel(MarianConfig(**common)), base),
        "xlpe": (XLPEMarianMTModel(XLPEMarianConfig(**common)), {**base, "reorder_positions": positions}),
        "dpe": (DPEMarianMTModel(DPEMarianConfig(**common)), {**base, "target_positions": positions}),
        "stock BART": (BartForConditionalGeneration(BartConfig(**bart)), base),
        "mvpe_pos": (MvPEPosForConditionalGeneration(MvPEPosConfig(**common, pos_tags=["A", "B", "C"], pos_dim=16,
                                                                   pe_step=1.0)),
                     {**base, "pos_tag_ids": tags, "decoder_pos_tag_ids": tags}),
    }


def step_times(model, inputs, steps, compiled):
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    forward = torch.compile(model, fullgraph=True) if compiled else model
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = forward(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--d_model", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    print("| family | eager step (ms) | compiled step (ms) | speed-up | first compiled step (s) |")
    print("|---|---|---|---|---|")
    for name, (model, inputs) in family_setups(args.d_model, 16, 24).items():
        eager = step_times(model, inputs, args.steps, compiled=False)[args.warmup:]
        torch._dynamo.reset()
        compiled = step_times(model, inputs, args.steps, compiled=True)
        first, compiled = compiled[0], compiled[args.warmup:]
        e, c = statistics.median(eager) * 1e3, statistics.median(compiled) * 1e3
        print(f"| {name} | {e:.1f} | {c:.1f} | {e / c:.2f}x | {first:.1f} |", flush=True)


if __name__ == "__main__":
    main()
