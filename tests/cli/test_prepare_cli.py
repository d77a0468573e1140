"""xlpe-prepare as a user runs it: the README's line on a Multi30k slice (splits, report per split, tokenizer
trained and saved beside the features), a deterministic tokenizer (the cache hits on an identical second run),
one-line user errors with status 2, and xlpe-train --prepared_dataset reading all of it with no extra flags
(trains, evaluates, predicts, writes the card) and refusing raw split flags beside it."""

from __future__ import annotations

import gzip
import json
import re
import shlex
import subprocess
import sys
import warnings

import pytest
from conftest import REPO_ROOT, SHARED_DIR, TINY_MODEL_ARGS, write_multi30k_slice

from xlpe.cli.prepare import main
from xlpe.features.tokenization import tokenizer_fingerprint, train_joint_tokenizer, vocab_fingerprint

MULTI30K = SHARED_DIR / "data" / "multi30k" / "raw"
FAST_EFLOMAL = json.dumps({"n_iterations": [4, 4, 8], "n_samplers": 1})
TINY_MODEL = [
    *TINY_MODEL_ARGS,
    "--max_steps",
    "2",
    "--per_device_train_batch_size",
    "16",
    "--per_device_eval_batch_size",
    "12",
    "--val_max_target_length",
    "8",
    "--report_to",
    "none",
    "--num_translation_examples",
    "0",
    "--average_last_checkpoints",
    "0",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--early_stopping_patience",
    "0",
]  # no data/tokenizer/language flag


def readme_command(program: str) -> list[str]:
    """The README's `program` line (continuations joined, comment dropped) as argv."""
    block = re.findall(r"```bash\n(.*?)```", (REPO_ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    text = "\n".join(block).replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(program + " "))
    return shlex.split(line.split("  #")[0])[1:]


def write_corpus(folder, lines_per_split=None):
    write_multi30k_slice(folder, lines_per_split)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """The README's xlpe-prepare line, exactly as written, in a folder holding the files it names."""
    folder = tmp_path_factory.mktemp("readme")
    write_corpus(folder)
    argv = readme_command("xlpe-prepare")
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 8000 pieces asked of 120 sentence pairs: the trainer warns
        patch.chdir(folder)
        assert main(argv) == 0
    return folder, argv


def test_readme_line_prepares_every_split_with_a_trained_tokenizer(readme_run):
    import datasets
    from transformers import AutoTokenizer

    folder, argv = readme_run
    assert "--tokenizer" not in argv
    output = folder / argv[argv.index("--output") + 1]
    data = datasets.load_from_disk(str(output))
    reports = json.loads((output / "report.json").read_text())
    assert list(data) == list(reports) == ["train", "validation", "test"]
    assert [reports[name]["pairs_read"] for name in data] == [120, 12, 12]
    assert all(len(data[name]) == reports[name]["pairs_kept"] > 0 for name in data)
    assert "target_text" in data["test"].column_names and "target_text" not in data["train"].column_names
    assert reports["test"]["source"].endswith("test.de") and reports["validation"]["target"].endswith("dev.en")
    tokenizer = AutoTokenizer.from_pretrained(output / "tokenizer")
    for report in reports.values():
        assert report["languages"] == {"source": "de", "target": "en"}
        assert report["tokenizer"]["vocab_fingerprint"] == vocab_fingerprint(tokenizer)
        assert report["tokenizer"]["origin"].startswith("trained here")
    # the saved tokenizer is the one the features were made with
    row = data["test"][0]
    assert row["input_ids"] == tokenizer(row["source_text"])["input_ids"]
    assert row["labels"] == tokenizer(text_target=row["target_text"])["input_ids"]
    # trained on the train split only: a test-only word is not one piece
    train_words = set((folder / "train.de").read_text().split() + (folder / "train.en").read_text().split())
    unseen = next(w for w in (folder / "test.en").read_text().split() if w not in train_words and len(w) > 6)
    assert len(tokenizer.tokenize(unseen)) > 1


def test_trained_tokenizer_is_canonical():
    """The Unigram trainer's scores jitter in the 13th digit and ties swap ids between runs; ours do not."""
    if not MULTI30K.is_dir():
        pytest.skip(f"{MULTI30K} not found")
    with gzip.open(MULTI30K / "train.en.gz", "rt") as en, gzip.open(MULTI30K / "train.de.gz", "rt") as de:
        texts = [next(en) for _ in range(1500)] + [next(de) for _ in range(1500)]
    first, second = (train_joint_tokenizer(texts, vocab_size=1000) for _ in range(2))
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    first(["a padded call"], padding="max_length", max_length=12, truncation=True)  # leaves settings behind
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    scores = [score for _, score in json.loads(first.backend_tokenizer.to_str())["model"]["vocab"]]
    assert all(score == round(score, 5) for score in scores) and scores[3:] == sorted(scores[3:], reverse=True)


def test_identical_second_run_hits_the_cache(tmp_path):
    write_corpus(tmp_path, {"train": 60, "dev": 6, "test": 6})
    argv = [
        "--source",
        str(tmp_path / "train.de"),
        "--target",
        str(tmp_path / "train.en"),
        "--test-source",
        str(tmp_path / "test.de"),
        "--test-target",
        str(tmp_path / "test.en"),
        "--tokenizer-vocab-size",
        "300",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--features",
        "reorder_positions",
        "--eflomal-options",
        FAST_EFLOMAL,
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*argv, "--output", str(tmp_path / "one")]) == 0
        assert main([*argv, "--output", str(tmp_path / "two")]) == 0
    one, two = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("one", "two"))
    assert not one["train"]["cache_hit"] and two["train"]["cache_hit"] and two["test"]["cache_hit"]
    assert one["train"]["fingerprint"] == two["train"]["fingerprint"]
    assert (tmp_path / "one/tokenizer/tokenizer.json").read_bytes() == (
        tmp_path / "two/tokenizer/tokenizer.json"
    ).read_bytes()
    assert len(list((tmp_path / "cache").glob("xlpe-tokenizer-*"))) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--source", "missing.de", "--target", "train.en"], r"--source missing.de: no such file"),
        (["--source", "train.de"], r"--source and --target go together"),
        (
            ["--source", "train.de", "--target", "train.en", "--test-source", "test.de"],
            r"--test-source and --test-target go together",
        ),
        (
            [
                "--dataset",
                "somewhere",
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--test-source",
                "test.de",
                "--test-target",
                "test.en",
            ],
            r"--dataset brings its own splits; --test-source, --test-target cannot",
        ),
        (
            ["--source", "train.de", "--target", "train.en", "--tokenizer", "tok", "--tokenizer-vocab-size", "50"],
            r"--tokenizer-vocab-size shape a tokenizer trained here; with --tokenizer none is trained",
        ),
        (
            ["--source", "train.de", "--target", "train.en", "--tokenizer", "tok/"],
            r"--tokenizer tok/: no such local directory \(leave --tokenizer out to train one",
        ),
        (["--source", "train.de", "--target", "train.en", "--tokenizer", "./empty"], r"--tokenizer \./empty: "),
        (["--source", "train.de", "--target", "dev.en"], r"train.de has 3 lines, dev.en has 2 lines"),
        (
            ["--source", "train.de", "--target", "train.en", "--keep-text", "some"],
            r"argument --keep.text: invalid choice: .some.",
        ),
        ([], r"give training text: --source and --target files, or --dataset"),
    ],
    ids=[
        "missing-file",
        "source-alone",
        "test-source-alone",
        "dataset-and-files",
        "tokenizer-and-training-options",
        "tokenizer-not-found",
        "not-a-tokenizer",
        "line-counts",
        "bad-choice",
        "no-input",
    ],
)
def test_user_errors_print_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, lines in (("train", 3), ("dev", 2), ("test", 2)):
        for lang in ("de", "en"):
            (tmp_path / f"{name}.{lang}").write_text("ein hund\n" * lines)
    (tmp_path / "empty").mkdir()  # a directory that is no tokenizer (not ".": an output inside an input is refused)
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--output", "out"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xlpe-prepare: error: ") and re.search(message, err[0]), err
    assert not (tmp_path / "out").exists()


def test_console_script_error_has_no_traceback(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlpe.cli.prepare",
            "--source",
            str(tmp_path / "none.de"),
            "--target",
            str(tmp_path / "none.en"),
            "--output",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == f"xlpe-prepare: error: --source {tmp_path / 'none.de'}: no such file"


# ---------------------------------------------------------------- xlpe-train --prepared_dataset


def test_train_from_prepared_dataset_needs_no_other_flags(readme_run):
    from transformers import AutoTokenizer

    from xlpe.training.run import main as train_main

    folder, argv = readme_run
    prepared = folder / argv[argv.index("--output") + 1]
    metrics = train_main(["--prepared_dataset", str(prepared), "--output_dir", str(folder / "run"), *TINY_MODEL])
    assert metrics["train_samples"] == 120 and metrics["eval_samples"] == 12 and metrics["predict_samples"] == 12
    assert {"eval_bleu", "predict_bleu", "predict_chrf"} <= set(metrics)
    scores = json.loads((folder / "run" / "test_scores.json").read_text())
    assert scores["bleu"]["signature"].startswith("nrefs:1") and "tok:13a" in scores["bleu"]["signature"]
    card = (folder / "run" / "README.md").read_text()
    assert "- de" in card and "- en" in card and "bleu" in card.lower()  # languages recorded by xlpe-prepare
    saved = [AutoTokenizer.from_pretrained(path) for path in (folder / "run", prepared / "tokenizer")]
    assert saved[0].get_vocab() == saved[1].get_vocab()  # the tokenizer found beside the features


def test_readme_train_line_parses(readme_run, monkeypatch):
    from xlpe.training.run_config import parse_arguments

    folder, _ = readme_run
    monkeypatch.chdir(folder)
    model_args, data_args, _ = parse_arguments(readme_command("xlpe-train"))
    assert data_args.prepared_dataset and model_args.tokenizer_name.endswith("tokenizer")
    assert (data_args.source_lang, data_args.target_lang) == ("de", "en")


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--validation_source_file", "dev.de", "--validation_target_file", "dev.en"],
            r"--validation_source_file, --validation_target_file would be ignored",
        ),
        (["--test_file", "test.en"], r"--test_file would be ignored"),
        (["--train_source_file", "train.de"], r"--train_source_file would be ignored"),
        (["--dataset_name", "wmt16"], r"--dataset_name would be ignored"),
        (["--target_lang", "fr"], r"--target_lang fr but --prepared_dataset .* target language 'en'"),
    ],
    ids=["validation-files", "test-file", "train-file", "dataset-name", "other-language"],
)
def test_raw_data_flags_beside_prepared_dataset_are_refused(readme_run, monkeypatch, capsys, extra, message):
    from xlpe.cli.train import cli

    folder, argv = readme_run
    monkeypatch.chdir(folder)
    monkeypatch.setattr(
        sys, "argv", ["xlpe-train", "--prepared_dataset", "prepared", "--output_dir", "refused", *extra]
    )
    assert cli() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xlpe-train: error: ") and re.search(message, err[0]), err
    assert not (folder / "refused").exists()


def test_another_tokenizer_than_the_prepared_one_is_named(readme_run, toy_tokenizer, tmp_path):
    from xlpe.training.run import main as train_main

    folder, _ = readme_run
    toy_tokenizer.save_pretrained(tmp_path / "toy")
    with pytest.raises(ValueError, match=r"prepared with another tokenizer than this run's .*prepared/tokenizer"):
        train_main(
            [
                "--prepared_dataset",
                str(folder / "prepared"),
                "--tokenizer_name",
                str(tmp_path / "toy"),
                "--output_dir",
                str(tmp_path / "run"),
                *TINY_MODEL,
            ]
        )


def test_it_states_its_plan_and_how_long_it_took(tmp_path, monkeypatch, capsys):
    """Before the work: the pairs per split, the steps (tokenizer, alignment, features) and an estimate at the
    documented rate; after it: the time and the rate on this machine."""
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(readme_command("xlpe-prepare")) == 0
    err = capsys.readouterr().err
    assert (
        "xlpe-prepare: plan: 144 pairs (train 120, validation 12, test 12): train a joint tokenizer on the train "
        "split; align the words of train, validation, test with eflomal (both directions); read off the features "
        "(positions, tags of given taggers); about 0 s on 2 cores for "
    ) in err
    assert "longer sentences cost more than in proportion, more cores are faster, a loaded machine slower)" in err
    assert re.search(r"xlpe-prepare: took \d+ s \([\d,]+ pairs/s on this machine\)", err)
    assert err.index("plan:") < err.index("wrote")


def test_the_estimate_grows_with_sentence_length_not_only_with_pairs():
    """The plan's estimate counts words and, for the splits eflomal aligns, source x target word products: the same
    number of pairs twice as long is estimated at more than twice the time (a per-pair rate said 21 s for 12k news
    pairs that took 36 s on a quiet machine, 115 s on a loaded one)."""
    from types import SimpleNamespace

    from xlpe.cli.prepare import _plan_line, estimate_work
    from xlpe.features.corpus import ParallelSplit

    def split(words):
        return ParallelSplit([" ".join(["a"] * words)] * 1000, [" ".join(["b"] * words)] * 1000, "s", "t")

    assert estimate_work({"train": split(3)}, ["train"]) == (6000, 9000)
    assert estimate_work({"train": split(3)}, []) == (6000, 0)  # alignments given: no eflomal
    args = SimpleNamespace(tokenizer=None, features=None)
    seconds = []
    for words in (30, 60):
        about = re.search(r"about ([\d.]+) (s|min)", _plan_line(args, {"train": split(words)}))
        seconds.append(float(about[1]) * (60 if about[2] == "min" else 1))
    assert seconds[1] > 2.2 * seconds[0] > 0
