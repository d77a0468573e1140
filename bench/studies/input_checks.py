"""What the models' input checks cost (issues 14 and 38): every family with `check_inputs=True` (the default: token
ids in the vocabulary, right padding, each family's extra inputs; one host sync per encoder call and per training
forward) against the same model, same weights, with `check_inputs=False`, and both against the stock model the
family is compared with in bench/speed.py (Marian for XL PE, Marian with DPE's extra encoder layers for DPE, BART
for mvPE+POS: no checks), side by side in one process.

    python bench/studies/input_checks.py [--repeats 5] [--size small] [--threads 1]

The setup is bench/speed.py's (its synthetic batches, its `small` dims, process CPU time): a train step is
forward + backward + AdamW with the family's training inputs; generation is beam 5 with forced length. Models
are interleaved within each repeat (order reversed every other repeat); each repeat gives one ratio per pair.
Prints a Markdown table: the median ratio and the min-max over repeats. The two "vs stock" columns are the
eager train-step overhead of the family with its checks on (what bench/speed.py measures) and off (the model
alone); under `torch.compile` the checks are skipped (tests/training/test_host_syncs.py), so the second is the
compiled comparison's eager counterpart.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib.speed_models import SIZES, bart_kwargs, bart_view, make_batches, marian_kwargs  # noqa: E402
from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel  # noqa: E402

import xlpe  # noqa: E402


def dpe_stock(dims):  # bench/speed.py's baseline of DPE: stock Marian with DPE's extra encoder layers (same parameters)
    extra = xlpe.get_family("dpe").config_class().dpe_layers
    return MarianMTModel(MarianConfig(**marian_kwargs(dims, encoder_layers=dims["encoder_layers"] + extra)))


STOCK = {
    "xlpe": lambda dims: MarianMTModel(MarianConfig(**marian_kwargs(dims))),
    "dpe": dpe_stock,
    "mvpe_pos": lambda dims: BartForConditionalGeneration(BartConfig(**bart_kwargs(dims))),
}  # as bench/speed.py

FAMILIES = {  # name: (config kwargs builder, BART layout, training inputs, generation inputs)
    "xlpe": (marian_kwargs, False, lambda b: {"reorder_positions": b.reorder_positions}, lambda b: {}),
    "dpe": (marian_kwargs, False, lambda b: {"target_positions": b.target_positions}, lambda b: {}),
    "mvpe_pos": (
        bart_kwargs,
        True,
        lambda b: {"pos_tag_ids": b.pos_tag_ids, "decoder_pos_tag_ids": b.decoder_pos_tag_ids},
        lambda b: {"pos_tag_ids": b.pos_tag_ids},
    ),
}


def train_step(model, optimizer, batch, extra) -> None:
    loss = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels, **extra(batch)
    ).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def generate(model, batch, extra) -> None:
    model.eval()
    model.generate(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        num_beams=5,
        max_new_tokens=batch.new_tokens,
        min_new_tokens=batch.new_tokens,
        **extra(batch),
    )
    model.train()


def ratio_cell(numerator: list[float], denominator: list[float]) -> str:
    ratios = [a / b for a, b in zip(numerator, denominator)]
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--no-generate", action="store_true", help="time train steps only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dims = SIZES[args.size]
    batches = make_batches(2, dims["batch_size"], dims["vocab_size"], 30.0, seed=0)
    kinds = ("train",) if args.no_generate else ("train", "generate")
    print(
        f"{args.size} dims, {args.threads} thread(s), {args.repeats} repeats; ratios: median (min-max over repeats)\n"
    )
    print(
        "| family | train step: checked / unchecked | train step vs stock, checks on | train step vs stock, checks off "
        "| generate: checked / unchecked |"
    )
    print("|---|---|---|---|---|")
    for name in args.families.split(","):
        kwargs, bart_layout, train_extra, gen_extra = FAMILIES[name]
        family = xlpe.get_family(name)
        torch.manual_seed(0)
        checked = family.generation_model_class(family.config_class(**kwargs(dims))).train()
        unchecked = copy.deepcopy(checked)
        unchecked.config.check_inputs = False
        torch.manual_seed(0)
        runs = {"checked": checked, "unchecked": unchecked, "stock": STOCK[name](dims).train()}
        extras = {"checked": train_extra, "unchecked": train_extra, "stock": lambda b: {}}
        optimizers = {key: torch.optim.AdamW(model.parameters(), lr=1e-4) for key, model in runs.items()}
        data = [bart_view(b) for b in batches] if bart_layout else batches
        times = {(key, kind): [] for key in runs for kind in kinds}
        for repeat in range(args.repeats + 1):  # repeat 0 is the warm-up
            for kind in kinds:
                timed = list(runs) if kind == "train" else ["checked", "unchecked"]
                order = timed if repeat % 2 else list(reversed(timed))
                for key in order:
                    start = time.process_time()
                    for batch in data:
                        if kind == "train":
                            train_step(runs[key], optimizers[key], batch, extras[key])
                        else:
                            generate(runs[key], batch, gen_extra)
                    if repeat:
                        times[(key, kind)].append(time.process_time() - start)
        cells = [
            ratio_cell(times[("checked", "train")], times[("unchecked", "train")]),
            ratio_cell(times[("checked", "train")], times[("stock", "train")]),
            ratio_cell(times[("unchecked", "train")], times[("stock", "train")]),
            ratio_cell(times[("checked", "generate")], times[("unchecked", "generate")])
            if "generate" in kinds
            else "-",
        ]
        print(f"| {name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
