"""What the models' input checks cost (issue 14): every family with `check_inputs=True` (the default: token ids in
the vocabulary, right padding, each family's extra inputs; one host sync per encoder call and per training
forward) against the same model, same weights, with `check_inputs=False`, side by side in one process.

    python bench/input_checks.py [--repeats 5] [--size small]

The setup is bench/speed.py's (its synthetic batches, its `small` dims, one thread, process CPU time): a train
step is forward + backward + AdamW with the family's training inputs; generation is beam 5 with forced length.
Models are interleaved within each repeat (order reversed every other repeat); each repeat gives one ratio
(checked / unchecked). Prints a Markdown table: the median ratio and the min-max over repeats.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import xlpe  # noqa: E402
from benchlib.speed_models import SIZES, bart_kwargs, bart_view, make_batches, marian_kwargs  # noqa: E402

FAMILIES = {  # name: (config kwargs builder, BART layout, training inputs, generation inputs)
    "xlpe": (marian_kwargs, False, lambda b: {"reorder_positions": b.reorder_positions}, lambda b: {}),
    "dpe": (marian_kwargs, False, lambda b: {"target_positions": b.target_positions}, lambda b: {}),
    "mvpe_pos": (bart_kwargs, True, lambda b: {"pos_tag_ids": b.pos_tag_ids, "decoder_pos_tag_ids": b.decoder_pos_tag_ids},
                 lambda b: {"pos_tag_ids": b.pos_tag_ids}),
}  # fmt: skip


def train_step(model, optimizer, batch, extra) -> None:
    loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels, **extra(batch)).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def generate(model, batch, extra) -> None:
    model.eval()
    model.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask, num_beams=5,
                   max_new_tokens=batch.new_tokens, min_new_tokens=batch.new_tokens, **extra(batch))  # fmt: skip
    model.train()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dims = SIZES[args.size]
    batches = make_batches(2, dims["batch_size"], dims["vocab_size"], 30.0, seed=0)
    print(f"| family | train step: checked / unchecked (median, min-max over {args.repeats}) | generate: same |")
    print("|---|---|---|")
    for name in args.families.split(","):
        kwargs, bart_layout, train_extra, gen_extra = FAMILIES[name]
        family = xlpe.get_family(name)
        torch.manual_seed(0)
        checked = family.generation_model_class(family.config_class(**kwargs(dims))).train()
        unchecked = copy.deepcopy(checked)
        unchecked.config.check_inputs = False
        runs = {"checked": checked, "unchecked": unchecked}
        optimizers = {key: torch.optim.AdamW(model.parameters(), lr=1e-4) for key, model in runs.items()}
        data = [bart_view(b) for b in batches] if bart_layout else batches
        times = {(key, kind): [] for key in runs for kind in ("train", "generate")}
        for repeat in range(args.repeats + 1):  # repeat 0 is the warm-up
            order = list(runs) if repeat % 2 else list(reversed(runs))
            for kind in ("train", "generate"):
                for key in order:
                    start = time.process_time()
                    for batch in data:
                        if kind == "train":
                            train_step(runs[key], optimizers[key], batch, train_extra)
                        else:
                            generate(runs[key], batch, gen_extra)
                    if repeat:
                        times[(key, kind)].append(time.process_time() - start)
        cells = []
        for kind in ("train", "generate"):
            ratios = [a / b for a, b in zip(times[("checked", kind)], times[("unchecked", kind)])]
            cells.append(f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
