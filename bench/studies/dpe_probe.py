"""Does DPE's block learn the target order? (issue 15, item 5: why DPE does not reproduce at this scale)

    python bench/studies/dpe_probe.py --model runs/repro/runs/zh-en-dpe-lambda0.5-seed1 --prepared
    runs/repro/data/zh-en/clean
    python bench/studies/dpe_probe.py --model M1 M2 M3 --prepared P --json runs/dpe_probe.json  # one row per model +
    mean

DPE (Zheng et al., Sec. 3.2) replaces the absolute PE of source token i by r_i, the output of a small encoder
block, and pulls r_i toward PE[t_i], the sinusoid of the token's *target-side* rank t_i (order loss, Eq. 1). If the
block learns that, r carries reordering information the translation layers can use; if it does not, DPE is a
Transformer with two more encoder layers and a learned position signal. On the test split (the source alone goes
into the block; t comes from the split's alignments, tokens without a target rank are left out) this reports:

* `gate`: g in X + PE + g (r - PE) (1 = the paper's model; a trained g far from 1 means the translation loss
  turned the block's signal down or up);
* `order_loss`: Eq. 1 of r, next to `order_loss_monotone` (r_i = PE[i], no reordering at all) and
  `order_loss_zero` (r = 0): a block that learned order must beat the monotone signal, not just the zero one;
* `tau_decoded`: token-level Kendall tau-b between the target ranks t and the position r_i decodes to (the row of
  the sinusoid table nearest to r_i within the sentence), averaged over sentences with 2+ supervised tokens, next
  to `tau_monotone` (tau between t and the source index i: how much reordering the split has);
* `closer_to_target`: among tokens with t_i != i, the share whose r_i is nearer PE[t_i] than PE[i] (0.5 = chance);
* `exact_decoded` / `exact_monotone`: share of tokens whose decoded position is t_i / whose own index is t_i;
* `exact_source`: share of tokens whose decoded position is their own index i (1.0 for the plain PE: how much of
  the source position the block keeps);
* `norm_ratio`: mean |r_i| / |PE[i]| (the block's output is a post-LN vector; the sinusoid rows have norm sqrt(d/2)).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # the checkout, when run as a script

from xlpe.features.reordering import IGNORE_INDEX  # noqa: E402


def tau_b(a: np.ndarray, b: np.ndarray) -> float | None:
    """Kendall's tau-b of two equally long integer vectors (ties allowed); None when either is constant.
    (Not `xlpe.features.reordering.kendall_tau`: that one takes permutations, and decoded positions may tie.)"""
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    upper = np.triu(np.ones(da.shape, dtype=bool), 1)
    pa, pb = np.count_nonzero(da[upper]), np.count_nonzero(db[upper])
    if pa == 0 or pb == 0:
        return None
    return float((da * db)[upper].sum() / np.sqrt(pa * pb))


@torch.no_grad()
def probe(model, dataset, batch_size: int = 100) -> dict:
    """The statistics of the module docstring for one DPE model on one prepared split."""
    model.eval()
    pads = {
        "input_ids": model.config.pad_token_id,
        "attention_mask": 0,
        "target_positions": IGNORE_INDEX,
        "pos_tag_ids": 0,
    }

    def collate(rows):  # right padding, as training's collator
        width = max(len(row["input_ids"]) for row in rows)
        return {k: torch.tensor([list(row[k]) + [pads[k]] * (width - len(row[k])) for row in rows]) for k in rows[0]}

    table = model.model.encoder.embed_positions.weight.float()
    columns = ["input_ids", "attention_mask", "target_positions"] + (["pos_tag_ids"] if model.config.pos_tagger else [])
    sums = dict(
        order_loss=0.0,
        order_loss_monotone=0.0,
        order_loss_zero=0.0,
        closer=0,
        moved=0,
        exact_decoded=0,
        exact_monotone=0,
        exact_source=0,
        supervised=0,
        norm_ratio=0.0,
    )
    taus, taus_monotone = [], []
    dataset = dataset.select_columns(columns)
    for start in range(0, len(dataset), batch_size):
        chunk = dataset[start : start + batch_size]  # one read per batch, columns as lists
        rows = [dict(zip(columns, values)) for values in zip(*(chunk[k] for k in columns))]
        batch = collate(rows)
        extra = {"pos_tag_ids": batch["pos_tag_ids"]} if "pos_tag_ids" in batch else {}
        r = model.model.encoder(batch["input_ids"], batch["attention_mask"], **extra).dynamic_positions.float()
        targets = batch["target_positions"]
        supervised = batch["attention_mask"].bool() & (targets != IGNORE_INDEX)
        length = r.shape[1]
        index = torch.arange(length).expand_as(targets)
        pe_target = table[targets.clamp(min=0)]
        pe_own = table[:length].expand_as(r)
        to_target = (r - pe_target).pow(2).sum(-1)
        to_own = (r - pe_own).pow(2).sum(-1)
        d = r.shape[-1]
        sums["order_loss"] += float(to_target[supervised].sum()) / d
        sums["order_loss_monotone"] += float((pe_own - pe_target).pow(2).sum(-1)[supervised].sum()) / d
        sums["order_loss_zero"] += float(pe_target.pow(2).sum(-1)[supervised].sum()) / d
        moved = supervised & (targets != index)
        sums["moved"] += int(moved.sum())
        sums["closer"] += int((to_target < to_own)[moved].sum())
        sums["supervised"] += int(supervised.sum())
        sums["norm_ratio"] += float((r.norm(dim=-1) / pe_own.norm(dim=-1).clamp(min=1e-6))[supervised].sum())
        # the position each r_i decodes to: the nearest sinusoid row among the sentence's own positions
        distances = torch.cdist(r, table[:length].unsqueeze(0).expand(len(rows), -1, -1))  # [batch, i, j]
        real = batch["attention_mask"].bool()
        distances = distances.masked_fill(~real[:, None, :], float("inf"))
        decoded = distances.argmin(-1)
        sums["exact_decoded"] += int((decoded == targets)[supervised].sum())
        sums["exact_monotone"] += int((index == targets)[supervised].sum())
        sums["exact_source"] += int((decoded == index)[supervised].sum())
        for row in range(len(rows)):
            keep = supervised[row]
            if int(keep.sum()) < 2:
                continue
            t = targets[row][keep].numpy()
            for values, out in ((decoded[row][keep].numpy(), taus), (index[row][keep].numpy(), taus_monotone)):
                tau = tau_b(t, values)
                out.append(0.0 if tau is None else tau)  # a constant decoding carries no order: tau 0
    n = max(sums["supervised"], 1)
    return {
        "gate": round(float(model.model.encoder.dynamic_position.gate), 4),
        "order_loss": round(sums["order_loss"] / n, 4),
        "order_loss_monotone": round(sums["order_loss_monotone"] / n, 4),
        "order_loss_zero": round(sums["order_loss_zero"] / n, 4),
        "tau_decoded": round(float(np.mean(taus)), 4),
        "tau_monotone": round(float(np.mean(taus_monotone)), 4),
        "closer_to_target": round(sums["closer"] / max(sums["moved"], 1), 4),
        "exact_decoded": round(sums["exact_decoded"] / n, 4),
        "exact_monotone": round(sums["exact_monotone"] / n, 4),
        "exact_source": round(sums["exact_source"] / n, 4),
        "norm_ratio": round(sums["norm_ratio"] / n, 4),
        "tokens": sums["supervised"],
        "sentences": len(taus),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", nargs="+", required=True, help="trained DPE model directories")
    parser.add_argument("--prepared", required=True, help="prepared DatasetDict with target_positions (xlpe-prepare)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    import datasets

    from xlpe.models import DPEMarianMTModel

    split = datasets.load_from_disk(args.prepared)[args.split]
    if "target_positions" not in split.column_names:
        raise SystemExit(
            f"dpe_probe: error: {args.prepared} has no target_positions column (prepare with the DPE features)"
        )
    rows = []
    for path in args.model:
        row = {"model": path, **probe(DPEMarianMTModel.from_pretrained(path), split)}
        rows.append(row)
        print(json.dumps(row))
    keys = [k for k in rows[0] if k not in ("model", "tokens", "sentences")]
    mean = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in keys}
    std = {k: round(float(np.std([r[k] for r in rows], ddof=1)) if len(rows) > 1 else 0.0, 4) for k in keys}
    print(json.dumps({"mean": mean, "std": std}))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "mean": mean, "std": std}, indent=1) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
