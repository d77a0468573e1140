"""Where the standalone reorderer's Kendall tau gap comes from (issue 17): probes on a prepared corpus.

    python bench/studies/reorderer_probe.py fit --prepared runs/enja3 --reorderer runs/reo3-btg_crf  # test vs train fit
    python bench/studies/reorderer_probe.py ensemble --prepared runs/enja3 --reorderer runs/reo3-btg_crf
    runs/reo3-pairwise
    python bench/studies/reorderer_probe.py hypothesis --prepared runs/enja3 \\
        --hypotheses runs/vanilla/generated_predictions.txt [--reorderer runs/reo3-btg_crf] [--model runs/vanilla]
    python bench/studies/reorderer_probe.py positions --prepared runs/jackknifed/data --reorderer runs/reo3-btg_crf
    python bench/studies/reorderer_probe.py pos --prepared runs/enja3 --tokenizer runs/enja3/tokenizer \\
        --output_dir runs/reo3-pos

* `fit`: word-level tau / FRS / exact match on the test split and on the first `--train_rows` training pairs,
  against the oracle the features carry (a word's oracle key is the smallest XL position of its pieces, as in
  training). A large train-test gap says the model generalises poorly; a low train score says it underfits.
* `ensemble`: the same scores for the mean of several reorderers' pair log-odds, decoded by the BTG CKY.
* `hypothesis`: orders read off a machine translation instead of predicted from the source: each test source is
  aligned with its hypothesis (`--hypotheses`, one line per test sentence) by eflomal, jointly with the training
  pairs and seeded, and the BTG oracle of those links is scored against the test oracle. The same alignment with the
  reference in place of the hypothesis (another seed) is the ceiling: how well a second alignment run agrees with
  the oracle at all. With `--reorderer`, also that reorderer's pair log-odds with a vote of weight gamma for the order
  the hypothesis gives each word pair, decoded by the BTG CKY (gamma scanned on the test split: an upper bound).
* `positions`: how close a prepared training split's `reorder_positions` are to the `oracle_reorder_positions` kept
  beside them (a jackknifed split, `xlpe-reorder jackknife`), at the word level (words as `--reorderer` splits them),
  with the monotone order beside it.
* `pos`: a probe, not a feature: the default reorderer (btg_crf, seed `--seed`) with an English POS-tag embedding
  (NLTK's perceptron tagger, `../shared/data/nltk_data`) added to every piece's token embedding, trained and scored
  as `fit` does. Tags are read off the words the tokenizer's pieces spell.

Learning-curve points come from `bench/studies/reorderer.py --train_limit N`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [
    str(Path(__file__).resolve().parents[2]),
    str(Path(__file__).resolve().parents[1]),
]  # checkout; benchlib

from benchlib.data import DATA  # noqa: E402

from xlpe.evaluation.alignment_quality import reordering_quality  # noqa: E402
from xlpe.features.predicted_reordering import collate  # noqa: E402
from xlpe.models.btg_chart import btg_decode  # noqa: E402

COLUMNS = ("input_ids", "attention_mask", "reorder_positions", "pos_tag_ids")
SCORES = ("kendall_tau", "fuzzy_reordering_score", "exact_match", "sentences")


def scored(predicted, oracle) -> dict:
    """Word-level quality of `predicted` orders against `oracle` (sentences of 2+ words), rounded for a table."""
    quality = reordering_quality(predicted, oracle, min_items=2)
    return {k: round(quality[k], 4) for k in SCORES}


@torch.no_grad()
def score(models, dataset, batch_size: int = 128) -> dict:
    """Word-level quality of the mean pair log-odds of `models` against the dataset's own oracle."""
    first = models[0]
    predicted, oracle = [], []
    for start in range(0, len(dataset), batch_size):
        rows = [
            {k: v for k, v in dataset[i].items() if k in COLUMNS}
            for i in range(start, min(start + batch_size, len(dataset)))
        ]
        batch = collate(rows, first.config.pad_token_id)
        extra = {"pos_tag_ids": pad_tags(rows, batch)} if "pos_tag_ids" in rows[0] else {}
        logits = sum(m(batch["input_ids"], batch["attention_mask"], **extra).pair_logits for m in models) / len(models)
        movable, word, counts = first.words(batch["input_ids"], batch["attention_mask"])
        positions = btg_decode(logits, counts)
        width = positions.shape[1]
        slot = torch.where(movable, word, width)
        keys = torch.full((len(rows), width + 1), 10**9).scatter_reduce_(
            1, slot, batch["reorder_positions"], reduce="amin"
        )
        for row in range(len(rows)):
            n = int(counts[row])
            oracle.append(np.argsort(np.argsort(keys[row, :n].numpy(), kind="stable"), kind="stable").tolist())
            predicted.append(positions[row, :n].tolist())
    return scored(predicted, oracle)


def pad_tags(rows, batch) -> torch.Tensor:
    width = batch["input_ids"].shape[1]
    return torch.tensor([r["pos_tag_ids"] + [0] * (width - len(r["pos_tag_ids"])) for r in rows])


def fit_report(models, data, train_rows: int) -> dict:
    for m in models:
        m.eval()
    return {
        "test": score(models, data["test"]),
        f"train[:{train_rows}]": score(models, data["train"].select(range(train_rows))),
    }


def pos_probe(args, data) -> dict:
    from torch import nn
    from transformers import AutoTokenizer

    from xlpe.features.tagging import NLTK_DATA_ENV, get_tagger
    from xlpe.models.modeling_reorderer import XLPEReordererModel
    from xlpe.training.reorderer import ReordererTraining, build_reorderer, train_reorderer

    os.environ.setdefault(NLTK_DATA_ENV, str(DATA / "nltk_data"))
    tokenizer, tagger = AutoTokenizer.from_pretrained(args.tokenizer), get_tagger("nltk-en")
    torch.manual_seed(args.seed)
    plain = build_reorderer(tokenizer, seed=args.seed)
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

    training.collate, training.COLUMNS = (
        tagged_collate,
        COLUMNS,
    )  # the probe's patch: the trainer keeps and pads the tags
    if args.train_limit:
        train = train.select(range(args.train_limit))
    train_reorderer(model, train, args.output_dir, ReordererTraining(seed=args.seed), resume=False)
    return fit_report([model], data, args.train_rows)


@torch.no_grad()
def positions_probe(model, split, batch_size: int = 512) -> dict:
    from xlpe.models.modeling_reorderer import word_keys

    if "oracle_reorder_positions" not in split.column_names:
        raise SystemExit("positions: the train split has no oracle_reorder_positions (a jackknifed split keeps them)")
    given, oracle = [], []
    for start in range(0, len(split), batch_size):
        rows = split[start : start + batch_size]

        def padded(column):  # one batch of the split with `column` as its reorder_positions, padded by collate
            return collate(
                [
                    {"input_ids": i, "attention_mask": [1] * len(i), "reorder_positions": p}
                    for i, p in zip(rows["input_ids"], rows[column])  # noqa: B023
                ],
                model.config.pad_token_id,
            )

        batch = padded("reorder_positions")
        movable, word, counts = model.words(batch["input_ids"], batch["attention_mask"])
        width = int(counts.max())
        slot = torch.where(movable, word, width)
        for positions, out in (
            (batch["reorder_positions"], given),
            (padded("oracle_reorder_positions")["reorder_positions"], oracle),
        ):
            keys = word_keys(positions, slot, width)
            out += [keys[row, : int(counts[row])].tolist() for row in range(len(counts))]
    result = {}
    for name, predicted in (("reorder_positions", given), ("monotone", [list(range(len(o))) for o in oracle])):
        result[name] = scored(predicted, oracle)
    return result


def hypothesis_probe(args, data) -> dict:
    from reorderer import oracle_word_positions

    from xlpe.features.alignment import align_with_eflomal
    from xlpe.features.reordering import oracle_xl_positions

    sources, oracle = oracle_word_positions(data["test"])
    hypotheses = Path(args.hypotheses).read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(sources):
        raise SystemExit(f"--hypotheses: {len(hypotheses)} lines, the test split has {len(sources)} sentences")
    train = data["train"] if not args.train_limit else data["train"].select(range(args.train_limit))
    train_sources = [" ".join(t.split()) for t in train["source_text"]]
    train_targets = [" ".join(t.split()) for t in train["target_text"]]
    hypotheses = [" ".join(h.split()) for h in hypotheses]
    references = [" ".join(t.split()) for t in data["test"]["target_text"]]

    def aligned_orders(
        targets: list[str], seed: int
    ) -> list[list[int]]:  # BTG oracle of each source aligned with its target
        links = align_with_eflomal(train_sources + sources, train_targets + targets, seed=seed)[len(train_sources) :]
        return [
            oracle_xl_positions(sorted(zip(flat[::2], flat[1::2])), len(text.split()))
            for flat, text in zip(links, sources)
        ]

    hypothesis_orders = aligned_orders(hypotheses, args.seed)
    result = {
        "hypotheses": args.hypotheses,
        "train_pairs": len(train_sources),
        "alignment_seed": args.seed,
        "hypothesis": scored(hypothesis_orders, oracle),
        "reference, aligned again": scored(aligned_orders(references, args.seed + 1), oracle),
    }
    if args.model:  # the same read off the translation model's own cross-attention (forced decoding of its hypotheses)
        result["hypothesis, cross-attention links"] = scored(attention_orders(args.model, sources, hypotheses), oracle)
    if args.write_orders:
        Path(args.write_orders).write_text(
            "".join(" ".join(map(str, sorted(range(len(o)), key=o.__getitem__))) + "\n" for o in hypothesis_orders),
            encoding="utf-8",
        )
    if args.reorderer:  # the reorderer's pair log-odds plus gamma for every pair the hypothesis puts in that order
        from xlpe.models.modeling_reorderer import XLPEReordererModel

        model = XLPEReordererModel.from_pretrained(args.reorderer[0]).eval()
        for gamma, predicted in voted_orders(model, data["test"], hypothesis_orders, HYPOTHESIS_WEIGHTS).items():
            result[f"reorderer + hypothesis, gamma {gamma}"] = scored(predicted, oracle)
    return result


HYPOTHESIS_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)


@torch.no_grad()
def attention_orders(model_dir: str, sources: list[str], hypotheses: list[str]) -> list[list[int]]:
    """BTG oracle of links read off cross-attention: each hypothesis piece t links the source word of the piece that
    the last decoder layer (mean over heads) attends to most at step t + 1 (the step that has seen piece t)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from xlpe.features.reordering import oracle_xl_positions
    from xlpe.features.tokenization import tokenize_with_word_ids

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    (source_ids, source_words), (target_ids, target_words) = (
        tokenize_with_word_ids(tokenizer, sources),
        tokenize_with_word_ids(tokenizer, hypotheses, target=True),
    )
    orders = []
    for ids, words, labels, label_words, text in zip(source_ids, source_words, target_ids, target_words, sources):
        start = torch.tensor([[model.config.decoder_start_token_id]])
        decoder_input = torch.cat([start, torch.tensor([labels[:-1]])], dim=1)
        attention = (
            model(input_ids=torch.tensor([ids]), decoder_input_ids=decoder_input, output_attentions=True)
            .cross_attentions[-1][0]
            .mean(0)
        )
        attention = torch.cat([attention[1:], attention[-1:]]).masked_fill(torch.tensor(words)[None, :] < 0, -1.0)
        best = attention.argmax(-1).tolist()
        links = sorted({(words[best[t]], w) for t, w in enumerate(label_words) if w >= 0})
        orders.append(oracle_xl_positions(links, len(text.split())))
    return orders


@torch.no_grad()
def voted_orders(model, test, hint_positions, gammas, batch_size: int = 128) -> dict:
    """BTG-decoded word positions of `model`'s pair log-odds l[a, c] + gamma * sign(hint[c] - hint[a]) per gamma."""
    result = {gamma: [] for gamma in gammas}
    for start in range(0, len(test), batch_size):
        columns = test[start : start + batch_size]
        rows = [{"input_ids": i, "attention_mask": m} for i, m in zip(columns["input_ids"], columns["attention_mask"])]
        batch = collate(rows, model.config.pad_token_id)
        logits = model(batch["input_ids"], batch["attention_mask"]).pair_logits
        _, _, counts = model.words(batch["input_ids"], batch["attention_mask"])
        vote = torch.zeros_like(logits)
        for row in range(len(rows)):
            hint = torch.tensor(hint_positions[start + row], dtype=logits.dtype)
            if len(hint) != int(counts[row]):
                raise SystemExit(
                    f"test sentence {start + row + 1}: the reorderer sees {int(counts[row])} words, "
                    f"the hint has {len(hint)}"
                )
            vote[row, : len(hint), : len(hint)] = torch.sign(hint[None, :] - hint[:, None])
        for gamma in gammas:
            positions = btg_decode(logits + gamma * vote, counts)
            result[gamma] += [positions[row, : int(counts[row])].tolist() for row in range(len(rows))]
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probe", choices=("fit", "ensemble", "pos", "hypothesis", "positions"))
    parser.add_argument("--prepared", required=True, help="xlpe-prepare output with train and test splits")
    parser.add_argument("--reorderer", nargs="+", help="trained reorderer directories (fit: the first; ensemble: all)")
    parser.add_argument("--tokenizer", help="pos: the corpus's tokenizer")
    parser.add_argument("--output_dir", help="pos: where the probe model is trained")
    parser.add_argument("--hypotheses", help="hypothesis: one translation per test sentence")
    parser.add_argument(
        "--model", help="hypothesis: the translation model that wrote them (adds links read off its cross-attention)"
    )
    parser.add_argument(
        "--write_orders", help="hypothesis: write the orders read off the hypotheses here (xlpe-reorder predict format)"
    )
    parser.add_argument("--train_rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--train_limit", type=int, help="pos: first N training pairs only (a smoke run)")
    args = parser.parse_args(argv)
    import datasets

    from xlpe.models.modeling_reorderer import XLPEReordererModel

    data = datasets.load_from_disk(args.prepared)
    if args.probe == "pos":
        result = pos_probe(args, data)
    elif args.probe == "hypothesis":
        result = hypothesis_probe(args, data)
    elif args.probe == "positions":
        result = positions_probe(XLPEReordererModel.from_pretrained(args.reorderer[0]), data["train"])
    else:
        paths = args.reorderer[:1] if args.probe == "fit" else args.reorderer
        models = [XLPEReordererModel.from_pretrained(p) for p in paths]
        result = {"reorderers": paths, **fit_report(models, data, args.train_rows)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
