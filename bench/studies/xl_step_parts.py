"""What XL PE Combination adds to a CPU train step, part by part, each part timed alone (issue 38).

    python bench/studies/xl_step_parts.py                  # 2 threads, 300 interleaved repeats a part
    python bench/studies/xl_step_parts.py --repeats 100 --threads 1

`bench/studies/xlpe_step_ratio.py` times the whole step of XL PE against stock MarianMT; on this 2-core machine that
ratio
moves by ±2-3 % between processes (docs/benchmarks/speed.md), more than the 1 % a change to one part is worth. This
bench times each thing the XL PE step does beyond stock's, alone and against what stock does in its place, at the
same dims and batch (d_model 256, 3+3 layers, 4 heads, one 32 x 24 batch from `xlpe_step_ratio.make_batch`), forward
+ backward, interleaved with its stock counterpart, median of `--repeats`:

* layer 1's Q/K/V: HeadXL (`XLHeadAttention.project`, the tau heads' rows on Z_XL, the others on Z_abs) against the
  stock projection of the same module; also the form used until 2026-11-28 (the stock projection of Z_abs plus
  (Z_XL - Z_abs) W on the tau heads' columns), kept here as the comparison;
* the XL side of the input: PE_XL looked up at the positions, PE_In-XL (Eq. 7), the gate and Z_XL = X + PE_xl_side
  under the dropout mask, against stock's Z_abs = (X + PE_abs) under its mask;
* the reorder predictor: forward, pairwise loss and backward (`bench/studies/predictor_cost.py`'s step; stock: nothing);
* the optimizer: fused AdamW and zero_grad over every parameter of the XL PE model against the stock model's;
* the input checks (`config.check_inputs`): source ids, labels and `reorder_positions` (stock: none).

The sum of the extras over a stock train step (timed here too, the same batch) is the ratio those parts imply; what
the list leaves out (the encoder's own bookkeeping: the movable-token mask, the output object, autograd nodes of
the extra parameters) is what the whole-step ratio adds on top of it. To bound that, three rows (not summed;
`--block-repeats`, 0 leaves them out) time whole blocks forward + backward against stock's: the encoder (with the
predictor's loss), the decoder (PositionOptionsMarianDecoder against MarianDecoder) and the whole model without
the optimizer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/studies: the sibling studies

from benchlib.speed_models import SIZES  # noqa: E402
from benchlib.timing import add_host_allocator_argument, set_host_allocator  # noqa: E402
from predictor_cost import interleaved_medians, predictor_step  # noqa: E402
from xlpe_step_ratio import build_models, make_batch, step_fn  # noqa: E402

from xlpe.models.extra_inputs import check_integer_tensor, check_permutation, check_source_inputs, check_target_inputs  # noqa: E402
from xlpe.models.modeling_xlpe import XLHeadAttention  # noqa: E402
from xlpe.models.reorder_predictor import keep_mask  # noqa: E402


def backward_of(outputs, upstream) -> None:
    sum((out * grad).sum() for out, grad in zip(outputs, upstream)).backward()


def clear(*tensors) -> None:
    for tensor in tensors:
        tensor.grad = None


def delta_form_project(attention: XLHeadAttention, hidden: torch.Tensor, xl_hidden: torch.Tensor) -> tuple:
    """HeadXL's Q/K/V as computed until 2026-11-28: the stock projection of Z_abs for every head, plus
    (Z_XL - Z_abs) W on the tau heads' columns (zero-padded to the others'); the same function as now."""
    shape = (*hidden.shape[:-1], -1, attention.head_dim)
    linears = (attention.q_proj, attention.k_proj, attention.v_proj)
    cols = attention.xl_heads * attention.head_dim
    weight = torch.cat([linear.weight[:cols] for linear in linears])
    deltas = F.linear(xl_hidden - hidden, weight).split(cols, dim=-1)
    return tuple(
        (linear(hidden) + F.pad(delta, (0, linear.out_features - cols))).view(shape).transpose(1, 2)
        for linear, delta in zip(linears, deltas)
    )


def projection_parts(attention: XLHeadAttention, hidden: torch.Tensor, xl_hidden: torch.Tensor) -> dict:
    """Layer 1's Q/K/V forward + backward: stock, HeadXL now, HeadXL in the delta form (before 2026-11-28)."""
    linears = (attention.q_proj, attention.k_proj, attention.v_proj)
    upstream = [torch.randn(hidden.shape[0], attention.num_heads, hidden.shape[1], attention.head_dim)] * 3
    leaves = (hidden, xl_hidden, *(p for linear in linears for p in linear.parameters()))
    forms = {
        "stock": lambda: super(XLHeadAttention, attention).project(hidden),
        "xl": lambda: attention.project(hidden, xl_hidden_states=xl_hidden),
        "before": lambda: delta_form_project(attention, hidden, xl_hidden),
    }

    def timed(form):
        def step():
            backward_of(form(), upstream)
            clear(*leaves)

        return step

    return {name: timed(form) for name, form in forms.items()}


def input_side_parts(encoder, batch, dropout: float) -> dict:
    """From token embeddings to the layer-1 inputs: stock's Z_abs, XL PE's Z_abs and Z_XL (the encoder's lines)."""
    embeds = torch.randn(*batch.input_ids.shape, encoder.config.d_model, requires_grad=True)
    positions = batch.reorder_positions
    upstream = torch.randn_like(embeds)
    leaves = (embeds, *encoder.xl_position.parameters())

    def stock():
        pe_abs = encoder.embed_positions(embeds.shape[:-1])
        ((embeds + pe_abs) * keep_mask(embeds, dropout)).backward(upstream)
        clear(*leaves)

    def xl():
        pe_abs = encoder.embed_positions(embeds.shape[:-1])
        pe_xl = F.embedding(positions, encoder.embed_positions.weight)
        keep = keep_mask(embeds, dropout)
        z_xl = (embeds + encoder.xl_position(pe_abs, pe_xl)) * keep
        backward_of(((embeds + pe_abs) * keep, z_xl), (upstream, upstream))
        clear(*leaves)

    return {"stock": stock, "xl": xl}


def optimizer_parts(models: dict) -> dict:
    """Fused AdamW step + zero_grad over each model's parameters (gradients filled once)."""
    parts = {}
    for key, name in (("stock", "stock"), ("xl", "xlpe")):
        parameters = [p for p in models[name].parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=1e-4, fused=True)

        def step(parameters=parameters, optimizer=optimizer):
            for parameter in parameters:
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)

        parts[key] = step
    return parts


def check_parts(config, batch) -> dict:
    def checks():
        check_source_inputs(config, input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        check_target_inputs(config, labels=batch.labels)
        check_integer_tensor("reorder_positions", batch.reorder_positions, tuple(batch.input_ids.shape))
        check_permutation("reorder_positions", batch.reorder_positions, batch.attention_mask.bool())

    return {"stock": lambda: None, "xl": checks}


BLOCK = "whole block: "  # rows that time a whole block of the model, not one extra: a check on the sum, not summed


def block_parts(models: dict, batch) -> list[tuple[str, dict]]:
    """The encoder, the decoder and the whole model, forward + backward (no optimizer), stock against XL PE on the
    same batch: the extras the parts leave out (the movable-token mask, the positions' `where`, the output object,
    autograd bookkeeping) are inside these, so they bound what the itemized sum misses."""
    stock, xl = models["stock"].train(), models["xlpe_unchecked"].train()
    d_model = xl.config.d_model
    memory = torch.randn(*batch.input_ids.shape, d_model)
    decoder_ids = batch.labels.clamp(min=0)

    def encoder(model, **extra):
        def step():
            out = model.get_encoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **extra)
            loss = out.last_hidden_state.pow(2).mean()
            if getattr(out, "reorder_loss", None) is not None:
                loss = loss + out.reorder_loss
            loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    def decoder(model):
        def step():
            out = model.get_decoder()(
                input_ids=decoder_ids, encoder_hidden_states=memory, encoder_attention_mask=batch.attention_mask
            )
            out.last_hidden_state.pow(2).mean().backward()
            model.zero_grad(set_to_none=True)

        return step

    def whole(model, **extra):
        def step():
            model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels, **extra
            ).loss.backward()
            model.zero_grad(set_to_none=True)

        return step

    oracle = {"reorder_positions": batch.reorder_positions}
    return [
        (
            BLOCK + "encoder (+ predictor loss)",
            {"stock": encoder(stock), "xl": encoder(xl, **oracle, compute_reorder_loss=True)},
        ),
        (BLOCK + "decoder", {"stock": decoder(stock), "xl": decoder(xl)}),
        (BLOCK + "whole model, no optimizer", {"stock": whole(stock), "xl": whole(xl, **oracle)}),
    ]


def measure(args) -> list[tuple[str, dict]]:
    dims = dict(SIZES[args.size])
    batch = make_batch(32, args.length, dims["vocab_size"], args.seed)
    models = build_models(dims, args.seed)
    xl = models["xlpe"].train()
    encoder = xl.model.encoder
    d_model = xl.config.d_model
    hidden = torch.randn(*batch.input_ids.shape, d_model, requires_grad=True)
    xl_hidden = torch.randn(*batch.input_ids.shape, d_model, requires_grad=True)
    rows = [
        ("layer 1 Q/K/V: HeadXL", projection_parts(encoder.layers[0].self_attn, hidden, xl_hidden)),
        ("input side: PE_XL, PE_In-XL (Eq. 7), Z_XL", input_side_parts(encoder, batch, xl.config.dropout)),
        (
            "reorder predictor: forward + pairwise loss + backward",
            {"stock": lambda: None, "xl": predictor_step({}, "written", batch, args.seed, d_model)},
        ),
        ("fused AdamW + zero_grad, all parameters", optimizer_parts(models)),
        ("input checks (source, labels, reorder_positions)", check_parts(xl.config, batch)),
    ]
    results = [(name, interleaved_medians(parts, args.repeats, args.warmup)) for name, parts in rows]
    if args.block_repeats:
        blocks = block_parts(models, batch)
        results += [(name, interleaved_medians(parts, args.block_repeats, 3)) for name, parts in blocks]
    stock_step = step_fn("stock", models["stock"], batch)
    results.append(("stock train step (the denominator)", interleaved_medians({"stock": stock_step}, args.steps, 3)))
    return results


def table(results: list[tuple[str, dict]]) -> str:
    lines = [
        "| part of the step | stock, ms | XL PE, ms | XL PE extra, ms |",
        "|---|---:|---:|---:|",
    ]
    extra_total = 0.0
    parts = [(name, ms) for name, ms in results[:-1] if not name.startswith(BLOCK)]
    for name, ms in parts:
        extra = ms["xl"] - ms["stock"]
        extra_total += extra
        lines.append(f"| {name} | {ms['stock']:.2f} | {ms['xl']:.2f} | {extra:+.2f} |")
        if "before" in ms:
            lines.append(
                f"| … HeadXL in the form before 2026-11-28 | {ms['stock']:.2f} | {ms['before']:.2f} | "
                f"{ms['before'] - ms['stock']:+.2f} (not summed) |"
            )
    stock_step = results[-1][1]["stock"]
    lines.append(f"| **sum of the extras** | | | **{extra_total:+.2f}** |")
    for name, ms in results[:-1]:
        if name.startswith(BLOCK):
            extra = ms["xl"] - ms["stock"]
            lines.append(f"| {name} | {ms['stock']:.2f} | {ms['xl']:.2f} | {extra:+.2f} (not summed) |")
    lines.append(f"| stock train step | {stock_step:.1f} | | implied ratio **{1 + extra_total / stock_step:.3f}** |")
    return "\n".join(lines)


def main(argv=None) -> list[tuple[str, dict]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(SIZES), help="model dims (bench/speed.py's sizes)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=300, help="timed repeats of each part (interleaved)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--block-repeats",
        type=int,
        default=60,
        help="timed repeats of the whole-block rows (encoder, decoder, whole model; 0: leave them out)",
    )
    parser.add_argument("--steps", type=int, default=30, help="timed stock train steps (the denominator)")
    parser.add_argument("--length", type=int, default=24, help="longest source/target sentence (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    add_host_allocator_argument(parser)
    args = parser.parse_args(argv)
    for name in ("threads", "repeats", "steps", "length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.block_repeats < 0:
        parser.error(f"--block-repeats must be 0 or more, got {args.block_repeats}")
    set_host_allocator(args.host_allocator)
    torch.set_num_threads(args.threads)
    results = measure(args)
    print(table(results), flush=True)
    return results


if __name__ == "__main__":
    main()
