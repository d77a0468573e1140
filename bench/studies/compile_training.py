"""Training-step speed of every family, eager vs `torch.compile` (inductor), on a tiny CPU model, and how often
the compiled step compiles over batches of changing shapes.

    python bench/studies/compile_training.py [--steps 20] [--d_model 64] [--shapes 10] [--backend inductor]

One step = forward with labels and the family's extra inputs + backward + AdamW step, batch 16 x 24 tokens.
Stock MarianMT and BART (same sizes, same batch) are timed the same way beside the families, so their speed-ups
compare. Prints a Markdown table (median step time after warm-up; the first compiled steps include compilation)
and, with `--shapes N`, the graphs dynamo makes over N batches of different (sentences, length) shapes, with and
without the batch/length dimensions marked dynamic as `xlpe-train --torch_compile` marks them
(`xlpe.training.trainer.mark_dynamic_dimensions`)."""

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
from xlpe.training.trainer import mark_dynamic_dimensions


def family_setups(d_model, batch, length, vocab=256):
    common = dict(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=64,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        dropout=0.1,
    )
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
        "mvpe_pos": (
            MvPEPosForConditionalGeneration(MvPEPosConfig(**common, pos_tags=["A", "B", "C"], pos_dim=16, pe_step=1.0)),
            {**base, "pos_tag_ids": tags, "decoder_pos_tag_ids": tags},
        ),
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


def shaped(inputs, batch, length):
    """`inputs` cut or tiled to `batch` sentences x `length` tokens (every tensor of the step, same content)."""
    return {key: value.repeat(2, 2)[:batch, :length].contiguous() for key, value in inputs.items()}


def graphs_over_shapes(model, inputs, count, marked, backend):
    """Graphs dynamo makes while the compiled train step runs over `count` shapes (the batch size and the length
    change at different steps, as token batches do); `marked`: dimensions marked dynamic before each step."""
    from torch._dynamo.utils import counters

    shapes = [(8, 12), (8, 16), (12, 16), (12, 10)] + [(4 + 3 * k % 13, 6 + 5 * k % 31) for k in range(count)]
    torch._dynamo.reset()
    counters.clear()
    forward = torch.compile(model, backend=backend)
    for batch, length in shapes[:count]:
        step = shaped(inputs, batch, length)
        if "reorder_positions" in step:  # a permutation again after cutting
            step["reorder_positions"] = torch.arange(length).expand(batch, length).contiguous()
        if "target_positions" in step:
            step["target_positions"] = torch.arange(length).flip(0).expand(batch, length).contiguous()
        forward(**(mark_dynamic_dimensions(step) if marked else step)).loss.backward()
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    return graphs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--shapes", type=int, default=0, help="also count graphs over this many batch shapes")
    parser.add_argument("--backend", default="inductor", help="for --shapes (aot_eager: no code generation)")
    parser.add_argument("--no-speed", action="store_true", help="only the --shapes table")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.shapes:
        print(f"| model | graphs over {args.shapes} shapes, dimensions marked dynamic | unmarked |")
        print("|---|---|---|")
        for name, (model, inputs) in family_setups(args.d_model, 16, 24).items():
            model.train()
            counts = [graphs_over_shapes(model, inputs, args.shapes, marked, args.backend) for marked in (True, False)]
            print(f"| {name} | {counts[0]} | {counts[1]} |", flush=True)
        if args.no_speed:
            return
        print()
    print("| family | eager step (ms) | compiled step (ms) | speed-up | first compiled step (s) |")
    print("|---|---|---|---|---|")
    for name, (model, inputs) in family_setups(args.d_model, 16, 24).items():
        eager = step_times(model, inputs, args.steps, compiled=False)[args.warmup :]
        torch._dynamo.reset()
        compiled = step_times(model, inputs, args.steps, compiled=True)
        first, compiled = compiled[0], compiled[args.warmup :]
        e, c = statistics.median(eager) * 1e3, statistics.median(compiled) * 1e3
        print(f"| {name} | {e:.1f} | {c:.1f} | {e / c:.2f}x | {first:.1f} |", flush=True)


if __name__ == "__main__":
    main()
