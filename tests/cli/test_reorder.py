"""xlpe-reorder end to end on a tiny corpus: train (eflomal or given alignments, resumable), predict, evaluate,
and its bad inputs (empty lines, over-long lines, mismatched alignment files)."""

from __future__ import annotations

import json
import os
import random

import pytest

from xlpe.cli.reorder import main

WORDS = "the cat dog sees chases small red ball man reads book garden child plays with a big old".split()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Target = source words reversed (a strongly reordering toy pair), alignments i-(n-1-i)."""
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("reorder_corpus")
    sources = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(120)]
    targets = [" ".join(reversed(s.split())).upper() for s in sources]
    links = [" ".join(f"{i}-{len(s.split()) - 1 - i}" for i in range(len(s.split()))) for s in sources]
    return (
        write_lines(folder / "train.src", sources),
        write_lines(folder / "train.tgt", targets),
        write_lines(folder / "train.align", links),
        sources,
    )


TINY = ["--d-model", "32", "--token-layers", "1", "--word-layers", "1", "--vocab-size", "60", "--batch-size", "16"]


@pytest.fixture(scope="module")
def reorderer(corpus, tmp_path_factory):
    source, target, alignments, _ = corpus
    output = tmp_path_factory.mktemp("reorderer")
    argv = [
        "train",
        "--source",
        str(source),
        "--target",
        str(target),
        "--alignments",
        str(alignments),
        "--output_dir",
        str(output),
        "--epochs",
        "12",
        "--learning-rate",
        "3e-3",
        *TINY,
    ]
    assert main(argv) == 0
    return output


def test_train_writes_a_loadable_reorderer_and_resumes(reorderer, corpus, capsys):
    names = {p.name for p in reorderer.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "reorderer_training.json"} <= names
    assert json.loads((reorderer / "reorderer_training.json").read_text())["resumed_from"] is None
    umask = os.umask(0)
    os.umask(umask)
    assert (reorderer / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask  # the user's umask, not 0600
    source, target, alignments, _ = corpus
    argv = [
        "train",
        "--source",
        str(source),
        "--target",
        str(target),
        "--alignments",
        str(alignments),
        "--output_dir",
        str(reorderer),
        "--epochs",
        "12",
        "--learning-rate",
        "3e-3",
        *TINY,
    ]
    report = (reorderer / "reorderer_training.json").read_text()
    capsys.readouterr()
    assert main(argv) == 0  # the same data and options: the finished reorderer is reused, not retrained
    captured = capsys.readouterr()
    assert "already holds this reorderer (same data and options): reused" in captured.err
    assert json.loads(captured.out)["reused"] is True and json.loads(captured.out)["training_pairs"] == 108
    assert (reorderer / "reorderer_training.json").read_text() == report
    for name in ("reorderer_training.json", "config.json", "model.safetensors"):  # killed after its last checkpoint
        (reorderer / name).unlink()
    assert main(argv) == 0  # resumed from that checkpoint
    assert "checkpoint-" in json.loads((reorderer / "reorderer_training.json").read_text())["resumed_from"]


def test_train_aligns_with_eflomal_when_no_alignments_are_given(corpus, tmp_path, capsys):
    source, target, _, _ = corpus
    assert (
        main(
            [
                "train",
                "--source",
                str(source),
                "--target",
                str(target),
                "--output_dir",
                str(tmp_path / "r"),
                "--epochs",
                "1",
                "--training-loss",
                "btg_crf",
                *TINY,
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["pairs_kept"] == 120 and (tmp_path / "r" / "model.safetensors").is_file()
    # a tenth held out (default --calibration-pairs 500) to choose the order prior, saved in the config
    assert (report["training_pairs"], report["calibration_pairs"]) == (108, 12)
    calibration = json.loads((tmp_path / "r" / "reorderer_training.json").read_text())["order_prior_calibration"]
    assert (
        report["order_prior"]
        == calibration["chosen"]
        == json.loads((tmp_path / "r" / "config.json").read_text())["order_prior"]
    )
    assert calibration["held_out_pairs"] == 12 and "0.0" in calibration["by_prior"]
    assert json.loads((tmp_path / "r" / "config.json").read_text())["training_loss"] == "btg_crf"


def test_predict_one_order_line_per_input_line(reorderer, tmp_path):
    lines = ["the cat sees a dog", "", "man reads", "  small   red ball  "]
    output = tmp_path / "orders.txt"
    assert (
        main(
            [
                "predict",
                "--reorderer",
                str(reorderer),
                "--input",
                str(write_lines(tmp_path / "in.txt", lines)),
                "--output",
                str(output),
            ]
        )
        == 0
    )
    orders = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(orders) == len(lines) and orders[1] == ""
    for line, order in zip(lines, orders):
        assert sorted(map(int, order.split())) == list(range(len(line.split())))
    assert orders[0] == "4 3 2 1 0"  # the toy language reverses: learnt from 120 pairs
    assert (
        main(
            [
                "predict",
                "--reorderer",
                str(reorderer),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(output),
                "--order-prior",
                "1e4",
                "--overwrite_output",
            ]
        )
        == 0
    )  # an existing output is refused without --overwrite
    assert output.read_text(encoding="utf-8").split("\n")[0] == "0 1 2 3 4"  # the prior outweighs the model


def test_evaluate_reports_reorderer_and_monotone(reorderer, corpus, tmp_path, capsys):
    source, target, alignments, sources = corpus
    assert (
        main(
            [
                "evaluate",
                "--reorderer",
                str(reorderer),
                "--source",
                str(source),
                "--target",
                str(target),
                "--alignments",
                str(alignments),
                "--output",
                str(tmp_path / "q.json"),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["reorderer"]["kendall_tau"] > 0.9 and result["monotone"]["kendall_tau"] == pytest.approx(-1.0)
    assert result["reorderer"]["sentences"] == sum(len(s.split()) >= 2 for s in sources)
    assert "| reorderer |" in captured.err and json.loads((tmp_path / "q.json").read_text()) == result
    # an external order file (e.g. lader's) is scored the same way: the oracle itself scores 1
    oracle = write_lines(
        tmp_path / "oracle.order", [" ".join(map(str, reversed(range(len(s.split()))))) for s in sources]
    )
    assert (
        main(
            [
                "evaluate",
                "--orders",
                str(oracle),
                "--source",
                str(source),
                "--target",
                str(target),
                "--alignments",
                str(alignments),
            ]
        )
        == 0
    )
    scored = json.loads(capsys.readouterr().out)["oracle.order"]
    assert scored["kendall_tau"] == 1.0 and scored["exact_match"] == 1.0


def run_expecting_usage_error(argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[transformers]")]
    assert len(err) == 1 or err[0].startswith("usage:"), err
    return err[-1]


def test_bad_inputs_give_one_line_and_exit_2(reorderer, corpus, tmp_path, capsys):
    source, target, _, _ = corpus
    long_input = write_lines(tmp_path / "long.txt", ["a b", " ".join(["cat"] * 201)])
    message = run_expecting_usage_error(["predict", "--reorderer", str(reorderer), "--input", str(long_input)], capsys)
    assert "line 2: 201 words" in message and "max_words" in message
    assert (
        main(
            [
                "predict",
                "--reorderer",
                str(reorderer),
                "--input",
                str(long_input),
                "--long-lines",
                "monotone",
                "--output",
                str(tmp_path / "o.txt"),
            ]
        )
        == 0
    )
    assert (tmp_path / "o.txt").read_text().split("\n")[1] == " ".join(map(str, range(201)))
    assert "1 lines over the reorderer's limit kept their order: [2]" in capsys.readouterr().err  # counted, visible
    mismatched = write_lines(tmp_path / "bad.align", ["0-0"] * 3 + ["0-0 9-0"] + ["0-0"] * 116)
    message = run_expecting_usage_error(
        [
            "train",
            "--source",
            str(source),
            "--target",
            str(target),
            "--alignments",
            str(mismatched),
            "--output_dir",
            str(tmp_path / "x"),
        ],
        capsys,
    )
    assert f"{mismatched}:4" in message
    short = write_lines(tmp_path / "short.align", ["0-0"])
    message = run_expecting_usage_error(
        [
            "evaluate",
            "--reorderer",
            str(reorderer),
            "--source",
            str(source),
            "--target",
            str(target),
            "--alignments",
            str(short),
        ],
        capsys,
    )
    assert str(short) in message and "1 lines" in message
    bad_orders = write_lines(tmp_path / "bad.order", ["0 0"] * 120)
    message = run_expecting_usage_error(
        [
            "evaluate",
            "--orders",
            str(bad_orders),
            "--source",
            str(source),
            "--target",
            str(target),
            "--alignments",
            str(corpus[2]),
        ],
        capsys,
    )
    assert f"{bad_orders}:1: expected a permutation" in message
    run_expecting_usage_error(["predict", "--reorderer", str(tmp_path / "nowhere"), "--input", str(long_input)], capsys)
    run_expecting_usage_error(["evaluate", "--source", str(source), "--target", str(target)], capsys)
    message = run_expecting_usage_error(
        [
            "train",
            "--source",
            str(source),
            "--target",
            str(target),
            "--output_dir",
            str(tmp_path / "y"),
            "--calibration-pairs",
            "-1",
        ],
        capsys,
    )
    assert "--calibration_pairs must be >= 0, got -1" in message


def test_attach_ships_the_reorderer_inside_an_xlpe_checkpoint(reorderer, tmp_path, toy_tokenizer, capsys):
    from transformers import AutoTokenizer

    from xlpe import XLPEMarianConfig, XLPEMarianMTModel, XLPETranslationPipeline

    def tiny_model(tokenizer, directory):
        config = XLPEMarianConfig(
            vocab_size=len(tokenizer),
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=16,
            decoder_ffn_dim=16,
            max_position_embeddings=64,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
        XLPEMarianMTModel(config).save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return directory

    tokenizer = AutoTokenizer.from_pretrained(reorderer)
    model_dir = tiny_model(tokenizer, tmp_path / "model")
    assert (
        main(
            ["attach", "--reorderer", str(reorderer), "--model", str(model_dir), "--output_dir", str(tmp_path / "with")]
        )
        == 0
    )
    model = XLPEMarianMTModel.from_pretrained(tmp_path / "with").eval()
    ids = tokenizer(["the cat sees a dog"], return_tensors="pt").input_ids
    positions = model.get_encoder()(ids).reorder_positions[0].tolist()
    assert positions[-1] == len(positions) - 1 and positions[:-1] != sorted(positions[:-1])  # learnt reversal used
    translator = XLPETranslationPipeline(model=model, tokenizer=tokenizer)
    assert isinstance(translator("the cat sees a dog", max_new_tokens=3)[0]["translation_text"], str)
    # a model with other token ids is refused with one line
    other = tiny_model(toy_tokenizer, tmp_path / "other")
    message = run_expecting_usage_error(["attach", "--reorderer", str(reorderer), "--model", str(other)], capsys)
    assert "another tokenizer" in message


def test_jackknife_writes_a_dataset_with_predicted_training_positions(reorderer, corpus, tmp_path, capsys):
    import datasets
    from transformers import AutoTokenizer

    from xlpe.features.prepare import prepare_dataset

    source, target, alignments, _ = corpus
    prepared, _ = prepare_dataset(
        source, target, AutoTokenizer.from_pretrained(reorderer), alignments=alignments, features=["reorder_positions"]
    )
    datasets.DatasetDict({"train": prepared.select(range(40))}).save_to_disk(str(tmp_path / "prepared"))
    capsys.readouterr()
    assert (
        main(
            [
                "jackknife",
                "--prepared",
                str(tmp_path / "prepared"),
                "--tokenizer",
                str(reorderer),
                "--folds",
                "2",
                "--output_dir",
                str(tmp_path / "jk"),
                "--epochs",
                "1",
                *TINY[:6],
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["train_pairs"] == 40
    train = datasets.load_from_disk(str(tmp_path / "jk" / "data"))["train"]
    assert train["oracle_reorder_positions"] == prepared.select(range(40))["reorder_positions"]
    assert all(sorted(p) == list(range(len(i))) for p, i in zip(train["reorder_positions"], train["input_ids"]))
    message = run_expecting_usage_error(
        [
            "jackknife",
            "--prepared",
            str(tmp_path / "prepared"),
            "--tokenizer",
            str(reorderer),
            "--folds",
            "1",
            "--output_dir",
            str(tmp_path / "x"),
        ],
        capsys,
    )
    assert "--folds must be >= 2" in message
    assert (
        main(
            [
                "jackknife",
                "--prepared",
                str(tmp_path / "prepared"),
                "--tokenizer",
                str(reorderer),
                "--folds",
                "2",
                "--output_dir",
                str(tmp_path / "mixed"),
                "--epochs",
                "1",
                "--oracle-share",
                "0.5",
                *TINY[:6],
            ]
        )
        == 0
    )
    mixed = datasets.load_from_disk(str(tmp_path / "mixed" / "data"))["train"]
    from xlpe.training.reorderer import mix_positions

    oracle_rows = [row == [1] for row in mix_positions([[0]] * 40, [[1]] * 40, 0.5, seed=1)]  # --seed's default draw
    assert 0 < sum(oracle_rows) < 40
    for m, p, o, keep in zip(
        mixed["reorder_positions"], train["reorder_positions"], train["oracle_reorder_positions"], oracle_rows
    ):
        assert m == (
            o if keep else p
        )  # same --seed, same folds: the jackknife of the first run, rows whole from one side
    message = run_expecting_usage_error(
        [
            "jackknife",
            "--prepared",
            str(tmp_path / "prepared"),
            "--tokenizer",
            str(reorderer),
            "--output_dir",
            str(tmp_path / "y"),
            "--oracle-share",
            "1.5",
        ],
        capsys,
    )
    assert "--oracle-share must be in [0, 1], got 1.5" in message
