"""Test-time reorderers side by side against the oracle BTG order, at the word level (issue 17).

For one prepared corpus (`xlpe-prepare` / `xlpe-train --cache_dir` output with `reorder_positions`; the test split
keeps `source_text` and `word_alignment`), this trains the standalone reorderer on the train split (or loads one)
and scores on the test split, per sentence of 2+ words: Kendall tau, fuzzy reordering score (FRS), exact match,
for

* the standalone reorderer decoded exactly over BTG trees (`decoder="btg"`, the default design),
* the same pair scores decoded by expected rank (`decoder="rank"`: a permutation, not always BTG-reachable),
* the built-in ranking predictor of an XL PE model (`--model`, optional: the design before 0.3),
* any external order file, e.g. lader's (`--orders NAME=FILE`, one line per test sentence, `xlpe-reorder
  predict` format),
* the monotone order (the floor).

    python bench/studies/reorderer.py --prepared runs/cache/prepared/xlpe-prepare-<id>/data --tokenizer runs/enja \\
        --output_dir runs/reorderer-enja [--model runs/enja] [--orders lader=lader.order] [--train_limit N]
    python bench/studies/reorderer.py --raw train.de train.en test.de test.en --output_dir runs/reorderer-deen

Writes <output_dir>/comparison.json and prints a markdown table (for docs/benchmarks/reorderer.md and its results file).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout without installing

from xlpe.cli.reorder import read_orders  # noqa: E402  (validated per line, as xlpe-reorder evaluate --orders)
from xlpe.evaluation.alignment_quality import reordering_quality  # noqa: E402
from xlpe.features.predicted_reordering import predict_word_positions  # noqa: E402
from xlpe.features.reordering import oracle_xl_positions, word_positions_from_tokens  # noqa: E402
from xlpe.features.tokenization import tokenize_with_word_ids  # noqa: E402
from xlpe.training.model_setup import set_word_starts  # noqa: E402


def oracle_word_positions(test) -> tuple[list[str], list[list[int]]]:
    sources = [" ".join(text.split()) for text in test["source_text"]]
    oracle = []
    for text, pharaoh in zip(sources, test["word_alignment"]):
        links = sorted(tuple(map(int, link.split("-"))) for link in pharaoh.split())
        oracle.append(oracle_xl_positions(links, len(text.split())))
    return sources, oracle


@torch.no_grad()
def builtin_predictor_positions(model_dir: str, sources: list[str], batch_size: int = 64) -> list[list[int]]:
    """Word positions from an XL PE model's own predictor (its encoder's `reorder_positions`)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
    model.attach_reorderer(None)  # the built-in predictor, even if a standalone reorderer rides along
    set_word_starts(model, tokenizer)  # whole words, as xlpe-train sets them (checkpoints before 0.2 lack the table)
    ids, word_ids = tokenize_with_word_ids(tokenizer, sources)
    result = []
    for start in range(0, len(ids), batch_size):
        rows = ids[start : start + batch_size]
        width = max(map(len, rows))
        batch = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        positions = model.get_encoder()(input_ids=batch, attention_mask=mask).reorder_positions
        for k, row in enumerate(rows):
            n_words = len(sources[start + k].split())
            result.append(word_positions_from_tokens(positions[k, : len(row)].tolist(), word_ids[start + k], n_words))
    return result


def prepare_raw(files: list[str], folder: Path) -> tuple[str, str]:
    """Joint tokenizer + oracle features for raw train/test files (train and test aligned in one eflomal run)."""
    import datasets

    from xlpe.features.corpus import read_parallel_files
    from xlpe.features.prepare import prepare_splits
    from xlpe.features.tokenization import train_joint_tokenizer

    if (folder / "data").is_dir():
        return str(folder / "data"), str(folder / "tokenizer")
    train, test = read_parallel_files(files[0], files[1]), read_parallel_files(files[2], files[3])
    tokenizer = train_joint_tokenizer(train.sources + train.targets, vocab_size=8000)
    tokenizer.save_pretrained(folder / "tokenizer")
    data, _ = prepare_splits(
        {"train": train, "test": test}, tokenizer, features=["reorder_positions"], keep_text=True, max_length=128
    )
    datasets.DatasetDict(data).save_to_disk(str(folder / "data"))
    return str(folder / "data"), str(folder / "tokenizer")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepared", help="prepared DatasetDict with train and test splits")
    parser.add_argument("--tokenizer", help="the tokenizer the corpus was prepared with")
    parser.add_argument(
        "--raw",
        nargs=4,
        metavar=("TRAIN_SRC", "TRAIN_TGT", "TEST_SRC", "TEST_TGT"),
        help="instead of --prepared/--tokenizer: raw files; a joint unigram tokenizer (8,000 pieces) "
        "is trained and train+test are aligned together, into <output_dir>/prepared",
    )
    parser.add_argument("--output_dir", required=True, help="reorderer directory (trained here unless it has one)")
    parser.add_argument("--model", help="an XL PE model trained on the same corpus: its built-in predictor")
    parser.add_argument("--orders", nargs="*", default=[], metavar="NAME=FILE", help="external order files to score")
    parser.add_argument("--train_limit", type=int, help="first N training pairs only")
    parser.add_argument("--epochs", type=float, default=None, help="default: ReordererTraining's")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--calibration_pairs",
        type=int,
        default=500,
        help="training pairs held out (at most a tenth) "
        "to choose the order prior on, as xlpe-reorder train does; 0: prior 0",
    )
    parser.add_argument(
        "--config",
        type=json.loads,
        default={},
        metavar="JSON",
        help='reorderer config fields, e.g. \'{"pair_scorer": "mlp"}\'',
    )
    args = parser.parse_args(argv)

    import datasets
    from transformers import AutoTokenizer

    from xlpe.models.modeling_reorderer import XLPEReordererModel
    from xlpe.training.reorderer import ReordererTraining, build_reorderer, calibration_split, train_reorderer

    output = Path(args.output_dir)
    if args.raw:
        args.prepared, args.tokenizer = prepare_raw(args.raw, output / "prepared")
    elif not (args.prepared and args.tokenizer):
        parser.error("give --prepared and --tokenizer, or --raw")
    data = datasets.load_from_disk(args.prepared)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    record: dict = {"date": time.strftime("%Y-%m-%d"), "prepared": args.prepared, "threads": torch.get_num_threads()}
    if (output / "model.safetensors").is_file():
        reorderer = XLPEReordererModel.from_pretrained(output)
    else:
        train = data["train"] if args.train_limit is None else data["train"].select(range(args.train_limit))
        train, held_out = calibration_split(train, args.calibration_pairs, args.seed)
        options = ReordererTraining(seed=args.seed, **({"epochs": args.epochs} if args.epochs else {}))
        reorderer = build_reorderer(tokenizer, seed=args.seed, **args.config)
        started = time.perf_counter()
        train_reorderer(reorderer, train, output, options, tokenizer=tokenizer, calibration_dataset=held_out)
        record.update(
            train_pairs=len(train),
            calibration_pairs=len(held_out) if held_out is not None else 0,
            train_seconds=round(time.perf_counter() - started, 1),
            config=args.config,
            epochs=options.epochs,
        )
    sources, oracle = oracle_word_positions(data["test"])
    rows = {}
    decoders = ("btg", "rank") if "pairwise" in reorderer.config.training_loss else ("btg",)  # rank: pair probabilities
    prior = reorderer.config.order_prior  # chosen on held-out pairs when trained here
    record["order_prior"] = prior
    for decoder in decoders:
        reorderer.config.decoder = decoder
        started = time.perf_counter()
        predicted, _ = predict_word_positions(reorderer, tokenizer, sources, long_lines="monotone")
        rows[f"standalone reorderer, {decoder} decoder, order prior {prior}"] = reordering_quality(
            predicted, oracle, min_items=2
        )
        record[f"predict_sentences_per_second_{decoder}"] = round(len(sources) / (time.perf_counter() - started), 1)
    if prior:  # the same model without the prior, beside it
        reorderer.config.order_prior, reorderer.config.decoder = 0.0, decoders[0]
        predicted, _ = predict_word_positions(reorderer, tokenizer, sources, long_lines="monotone")
        rows[f"standalone reorderer, {decoders[0]} decoder, order prior 0"] = reordering_quality(
            predicted, oracle, min_items=2
        )
        reorderer.config.order_prior = prior
    if args.model:
        rows["built-in ranking predictor (in-model)"] = reordering_quality(
            builtin_predictor_positions(args.model, sources), oracle, min_items=2
        )
    for item in args.orders:
        name, _, path = item.partition("=")
        rows[name] = reordering_quality(read_orders(path, [len(s.split()) for s in sources]), oracle, min_items=2)
    rows["monotone"] = reordering_quality([list(range(len(s.split()))) for s in sources], oracle, min_items=2)
    record["rows"] = rows
    (output / "comparison.json").write_text(json.dumps(record, indent=2) + "\n")
    print("| order | Kendall tau | FRS | exact match | sentences |\n|---|---|---|---|---|")
    for name, q in rows.items():
        print(
            f"| {name} | {q['kendall_tau']:.3f} | {q['fuzzy_reordering_score']:.3f} | "
            f"{q['exact_match']:.3f} | {q['sentences']} |"
        )
    print({k: v for k, v in record.items() if k != "rows"})
    return record


if __name__ == "__main__":
    main()
