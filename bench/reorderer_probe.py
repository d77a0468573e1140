"""Where the standalone reorderer's Kendall tau gap comes from (issue 17): probes on a prepared corpus.

    python bench/reorderer_probe.py fit --prepared runs/enja3 --reorderer runs/reo3-btg_crf            # test vs train fit
    python bench/reorderer_probe.py ensemble --prepared runs/enja3 --reorderer runs/reo3-btg_crf runs/reo3-pairwise
    python bench/reorderer_probe.py pos --prepared runs/enja3 --tokenizer runs/enja3/tokenizer --output_dir runs/reo3-pos

* `fit`: word-level tau / FRS / exact match on the test split and on the first `--train_rows` training pairs,
  against the oracle the features carry (a word's oracle key is the smallest XL position of its pieces, as in
  training). A large train-test gap says the model generalises poorly; a low train score says it underfits.
* `ensemble`: the same scores for the mean of several reorderers' pair log-odds, decoded by the BTG CKY.
* `pos`: a probe, not a feature: the default reorderer (btg_crf, seed `--seed`) with an English POS-tag embedding
  (NLTK's perceptron tagger, `../shared/data/nltk_data`) added to every piece's token embedding, trained and scored
  as `fit` does. Tags are read off the words the tokenizer's pieces spell.

Learning-curve points come from `bench/reorderer.py --train_limit N`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]  # checkout; benchlib

from benchlib.data import DATA  # noqa: E402
from xlpe.evaluation.alignment_quality import reordering_quality  # noqa: E402
from xlpe.features.predicted_reordering import collate  # noqa: E402
from xlpe.models.btg_chart import btg_decode  # noqa: E402

COLUMNS = ("input_ids", "attention_mask", "reorder_positions", "pos_tag_ids")


@torch.no_grad()
def score(models, dataset, batch_size: int = 128) -> dict:
    """Word-level quality of the mean pair log-odds of `models` against the dataset's own oracle."""
    first = models[0]
    predicted, oracle = [], []
    for start in range(0, len(dataset), batch_size):
        rows = [{k: v for k, v in dataset[i].items() if k in COLUMNS} for i in range(start, min(start + batch_size, len(dataset)))]
        batch = collate(rows, first.config.pad_token_id)
        extra = {"pos_tag_ids": pad_tags(rows, batch)} if "pos_tag_ids" in rows[0] else {}
        logits = sum(m(batch["input_ids"], batch["attention_mask"], **extra).pair_logits for m in models) / len(models)
        movable, word, counts = first.words(batch["input_ids"], batch["attention_mask"])
        positions = btg_decode(logits, counts)
        width = positions.shape[1]
        slot = torch.where(movable, word, width)
        keys = torch.full((len(rows), width + 1), 10**9).scatter_reduce_(1, slot, batch["reorder_positions"], reduce="amin")
        for row in range(len(rows)):
            n = int(counts[row])
            oracle.append(np.argsort(np.argsort(keys[row, :n].numpy(), kind="stable"), kind="stable").tolist())
            predicted.append(positions[row, :n].tolist())
    quality = reordering_quality(predicted, oracle, min_items=2)
    return {k: round(quality[k], 4) for k in ("kendall_tau", "fuzzy_reordering_score", "exact_match", "sentences")}


def pad_tags(rows, batch) -> torch.Tensor:
    width = batch["input_ids"].shape[1]
    return torch.tensor([r["pos_tag_ids"] + [0] * (width - len(r["pos_tag_ids"])) for r in rows])


def fit_report(models, data, train_rows: int) -> dict:
    for m in models:
        m.eval()
    return {"test": score(models, data["test"]), f"train[:{train_rows}]": score(models, data["train"].select(range(train_rows)))}


def pos_probe(args, data) -> dict:
    from torch import nn
    from transformers import AutoTokenizer

    from xlpe.features.tagging import NLTK_DATA_ENV, get_tagger
    from xlpe.models.modeling_reorderer import XLPEReordererModel
    from xlpe.training.reorderer import ReordererTraining, build_reorderer, train_reorderer

    os.environ.setdefault(NLTK_DATA_ENV, str(DATA / "nltk_data"))
    tokenizer, tagger = AutoTokenizer.from_pretrained(args.tokenizer), get_tagger("nltk-en")
    torch.manual_seed(args.seed)
    plain = build_reorderer(tokenizer)
    starts = plain.word_starts.flags.tolist()
    fixed = {tokenizer.eos_token_id, tokenizer.pad_token_id}

    def add_tags(batch):
        words_per_row, word_of_piece = [], []
        for ids in batch["input_ids"]:
            words, owner = [], []
            for token, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
                if token in fixed:
                    owner.append(None)
                    continue
                if starts[token] or not words:
                    words.append(piece.lstrip("▁"))
                else:
                    words[-1] += piece
                owner.append(len(words) - 1)
            words_per_row.append(words)
            word_of_piece.append(owner)
        tags = tagger.tag_ids(words_per_row)
        batch["pos_tag_ids"] = [[2 if w is None else t[w] for w in owner] for t, owner in zip(tags, word_of_piece)]
        return batch

    data = data.map(add_tags, batched=True, batch_size=1000)

    class TaggedReorderer(XLPEReordererModel):
        """Token embedding + tag embedding (scaled like the token embedding's sqrt(d) input scale)."""

        def __init__(self, config):
            super().__init__(config)
            self.tag_embed = nn.Embedding(len(tagger.vocabulary) + 8, config.d_model)
            nn.init.normal_(self.tag_embed.weight, std=0.02)
            token_embed, model = self.embed_tokens, self

            class Embed(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.tokens = token_embed

                def forward(self, ids):
                    return self.tokens(ids) + model.tag_embed(model.current_tags) / config.d_model**0.5

            self.embed_tokens = Embed()

        def forward(self, input_ids, attention_mask=None, reorder_positions=None, pos_tag_ids=None, **kwargs):
            self.current_tags = pos_tag_ids
            return super().forward(input_ids, attention_mask, reorder_positions)

    model = TaggedReorderer(plain.config)
    model.word_starts.set_from(starts)
    train = data["train"].remove_columns([c for c in data["train"].column_names if c not in COLUMNS])
    original_collate = collate

    def tagged_collate(features, pad):
        batch = original_collate(features, pad)
        batch["pos_tag_ids"] = pad_tags(features, batch)
        return batch

    import xlpe.training.reorderer as training

    training.collate, training.COLUMNS = tagged_collate, COLUMNS  # the probe's patch: the trainer keeps and pads the tags
    if args.train_limit:
        train = train.select(range(args.train_limit))
    train_reorderer(model, train, args.output_dir, ReordererTraining(seed=args.seed), resume=False)
    return fit_report([model], data, args.train_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probe", choices=("fit", "ensemble", "pos"))
    parser.add_argument("--prepared", required=True, help="xlpe-prepare output with train and test splits")
    parser.add_argument("--reorderer", nargs="+", help="trained reorderer directories (fit: the first; ensemble: all)")
    parser.add_argument("--tokenizer", help="pos: the corpus's tokenizer")
    parser.add_argument("--output_dir", help="pos: where the probe model is trained")
    parser.add_argument("--train_rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--train_limit", type=int, help="pos: first N training pairs only (a smoke run)")
    args = parser.parse_args()
    import datasets

    from xlpe.models.modeling_reorderer import XLPEReordererModel

    data = datasets.load_from_disk(args.prepared)
    if args.probe == "pos":
        result = pos_probe(args, data)
    else:
        paths = args.reorderer[:1] if args.probe == "fit" else args.reorderer
        models = [XLPEReordererModel.from_pretrained(p) for p in paths]
        result = {"reorderers": paths, **fit_report(models, data, args.train_rows)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
