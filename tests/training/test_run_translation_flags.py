"""run_translation's data/tokenizer/generation flags accepted by `xlpe-train`, each with its meaning:
`--source_prefix`, `--overwrite_cache`, `--pad_to_max_length`, `--ignore_pad_token_for_loss`,
`--forced_bos_token`, `--use_fast_tokenizer`."""

from __future__ import annotations

import json
import logging

import pytest
from test_train import tiny

from xlpe.features.corpus import ParallelSplit
from xlpe.features.prepare import prepare_splits
from xlpe.models import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.training.arguments import UsageError
from xlpe.training.data import add_source_prefix, load_raw_splits
from xlpe.training.model_setup import apply_generation_options
from xlpe.training.run import main, make_collator, parse_arguments


def write_corpus(folder, n=12):
    sources = [f"the dog {k} sees a cat" for k in range(n)]
    targets = [f"der hund {k} sieht eine katze" for k in range(n)]
    (folder / "train.en").write_text("\n".join(sources) + "\n")
    (folder / "train.de").write_text("\n".join(targets) + "\n")
    (folder / "train.align").write_text("\n".join("0-0 1-1 2-2 3-3 4-4 5-5" for _ in sources) + "\n")
    return [
        "--train_source_file",
        str(folder / "train.en"),
        "--train_target_file",
        str(folder / "train.de"),
        "--train_alignment_file",
        str(folder / "train.align"),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
    ]


def test_source_prefix_goes_before_every_source_and_shifts_given_alignments(tmp_path):
    split = ParallelSplit(["a b", "", "c"], ["x y", "z", "w"], "s", "t", alignments=[[0, 0, 1, 1], [], [0, 0]])
    add_source_prefix(split, "  translate  English: ")
    assert split.sources == [
        "translate English: a b",
        "",
        "translate English: c",
    ]  # empty stays empty (skipped, counted)
    assert split.alignments == [[2, 0, 3, 1], [], [2, 0]]
    _, data_args, _ = parse_arguments(
        ["--output_dir", str(tmp_path / "o"), *write_corpus(tmp_path), "--source_prefix", ">>de<<"]
    )
    model_args = parse_arguments(["--output_dir", str(tmp_path / "o")])[0]
    train = load_raw_splits(data_args, model_args)["train"]
    assert train.sources[0] == ">>de<< the dog 0 sees a cat" and train.alignments[0][:4] == [1, 0, 2, 1]


def test_overwrite_cache_recomputes_and_replaces_the_cached_features(tmp_path, toy_tokenizer):
    split = ParallelSplit(
        ["the man reads a book"] * 4,
        ["der mann liest ein buch"] * 4,
        "s",
        "t",
        alignments=[[0, 0, 1, 1, 2, 4, 3, 2, 4, 3]] * 4,
    )
    options = dict(features=["reorder_positions"], cache_dir=str(tmp_path / "cache"), keep_text=False)
    _, first = prepare_splits({"train": split}, toy_tokenizer, **options)
    _, hit = prepare_splits({"train": split}, toy_tokenizer, **options)
    _, fresh = prepare_splits({"train": split}, toy_tokenizer, **options, overwrite_cache=True)
    assert not first["train"].get("cache_hit") and hit["train"]["cache_hit"] and not fresh["train"].get("cache_hit")
    entries = [p.name for p in (tmp_path / "cache").iterdir()]
    assert len(entries) == 1 and entries[0].startswith("xlpe-prepare-")  # replaced in place, nothing left aside


def test_pad_to_max_length_and_ignore_pad_token_for_loss_shape_the_batches(tmp_path, toy_tokenizer):
    features = [{"input_ids": [5, 6, 2], "labels": [7, 2]}, {"input_ids": [5, 2], "labels": [8, 9, 10, 2]}]
    _, data_args, training_args = parse_arguments(
        [
            "--output_dir",
            str(tmp_path),
            "--max_source_length",
            "7",
            "--max_target_length",
            "5",
            "--pad_to_max_length",
            "true",
            "--ignore_pad_token_for_loss",
            "false",
        ]
    )
    batch = make_collator(toy_tokenizer, None, data_args, training_args)([dict(f) for f in features])
    assert batch["input_ids"].shape == (2, 7) and batch["labels"].shape == (2, 7)  # max(7, 5): one static length
    assert batch["labels"][0].tolist() == [7, 2] + [toy_tokenizer.pad_token_id] * 5  # pads are trained on
    _, data_args, training_args = parse_arguments(["--output_dir", str(tmp_path)])
    batch = make_collator(toy_tokenizer, None, data_args, training_args)([dict(f) for f in features])
    assert batch["input_ids"].shape == (2, 3) and batch["labels"][0].tolist() == [7, 2, -100, -100]  # the defaults


def test_forced_bos_token_and_use_fast_tokenizer(tmp_path, toy_tokenizer, caplog):
    config = XLPEMarianConfig(
        vocab_size=len(toy_tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
    )
    model = XLPEMarianMTModel(config)
    token = toy_tokenizer.convert_ids_to_tokens(10)
    model_args, data_args, _ = parse_arguments(
        ["--output_dir", str(tmp_path), "--forced_bos_token", token, "--use_fast_tokenizer", "false"]
    )
    with caplog.at_level(logging.WARNING, logger="xlpe"):
        apply_generation_options(model, toy_tokenizer, model_args, data_args)
    assert model.generation_config.forced_bos_token_id == 10 == model.config.forced_bos_token_id
    assert "--use_fast_tokenizer false" in caplog.text
    data_args.forced_bos_token = "<no-such-token>"
    with pytest.raises(UsageError, match="--forced_bos_token '<no-such-token>' is not in the tokenizer's vocabulary"):
        apply_generation_options(model, toy_tokenizer, model_args, data_args)


def test_flags_that_shape_raw_text_are_refused_with_a_prepared_dataset(tmp_path):
    (tmp_path / "prepared").mkdir()
    with pytest.raises(UsageError, match="--source_prefix would be ignored"):
        parse_arguments(
            [
                "--output_dir",
                str(tmp_path / "o"),
                "--prepared_dataset",
                str(tmp_path / "prepared"),
                "--source_prefix",
                "x",
            ]
        )


def test_source_prefix_trains_end_to_end_and_is_recorded(tmp_path):
    main(
        tiny(
            tmp_path,
            *write_corpus(tmp_path),
            "--model_type",
            "xlpe",
            "--recipe",
            "none",
            "--max_steps",
            "2",
            "--do_train",
            "--source_prefix",
            ">>de<<",
            "--overwrite_cache",
            "true",
        )
    )
    args = json.loads((tmp_path / "run" / "preparation_report.json").read_text())
    assert args["train"]["pairs_kept"] == 12
    assert ">>de<<" in (tmp_path / "run" / "README.md").read_text()
