"""End to end on a slice of real data (../shared/data/multi30k, en -> de), as a user runs it:

xlpe-prepare (eflomal alignments, oracle reorderings)  ->  xlpe-train --prepared_dataset (a few steps)
->  xlpe-translate + xlpe-evaluate bleu  ->  model card  ->  push to a local Hub  ->  the received folder
translating raw text in a fresh process where `xlpe` cannot be imported (Hub custom code only).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from huggingface_hub import ModelCard
from local_hub import local_hub_endpoint

from xlpe import XLPETranslationPipeline
from xlpe.cli.evaluate import main as evaluate_main
from xlpe.cli.prepare import main as prepare_main
from xlpe.cli.translate import load_pipeline
from xlpe.cli.translate import main as translate_main
from xlpe.features.tokenization import train_joint_tokenizer
from xlpe.training.model_card import write_model_card
from xlpe.training.push import push_model
from xlpe.training.run import main as train_main

SLICE = {"train": ("train", 400), "validation": ("val", 30), "test": ("test_2016_flickr", 30)}
REPO_ID = "xlpe-tests/xlpe-multi30k-slice"
FRESH_PROCESS_SCRIPT = """
import json, sys
sys.modules["xlpe"] = None  # the package is NOT importable: only the repository's custom code is
from transformers import pipeline
translator = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
print(json.dumps({"result": translator(sys.argv[2:], num_beams=2, max_new_tokens=8), "class": type(translator).__name__,
                  "module": type(translator.model).__module__}))
"""


def read_slice(shared_dir, name, lang, count):
    with gzip.open(shared_dir / "data" / "multi30k" / "raw" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as handle:
        return [next(handle).strip() for _ in range(count)]


@pytest.fixture(scope="module")
def pipeline_run(shared_dir, tmp_path_factory):
    """Everything up to the trained model; returns the working directory."""
    from datasets import Dataset, DatasetDict

    work = tmp_path_factory.mktemp("e2e")
    splits = {}
    for split, (name, count) in SLICE.items():
        en, de = read_slice(shared_dir, name, "en", count), read_slice(shared_dir, name, "de", count)
        splits[split] = Dataset.from_dict({"translation": [{"en": s, "de": t} for s, t in zip(en, de)]})
        (work / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (work / f"{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    DatasetDict(splits).save_to_disk(str(work / "data"))  # a local `datasets` directory
    train = splits["train"]["translation"]
    train_joint_tokenizer([p["en"] for p in train] + [p["de"] for p in train], vocab_size=800).save_pretrained(
        work / "tok"
    )

    assert (
        prepare_main(
            [
                "--dataset",
                str(work / "data"),
                "--source-lang",
                "en",
                "--target-lang",
                "de",
                "--tokenizer",
                str(work / "tok"),
                "--output",
                str(work / "prepared"),
                "--keep-text",
                "--max-length",
                "96",
            ]
        )
        == 0
    )
    metrics = train_main(
        [
            "--prepared_dataset",
            str(work / "prepared"),
            "--tokenizer_name",
            str(work / "tok"),
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--output_dir",
            str(work / "run"),
            "--d_model",
            "32",
            "--ffn_dim",
            "64",
            "--attention_heads",
            "4",
            "--encoder_layers",
            "1",
            "--decoder_layers",
            "1",
            "--max_steps",
            "6",
            "--per_device_train_batch_size",
            "16",
            "--per_device_eval_batch_size",
            "16",
            "--learning_rate",
            "3e-3",
            "--logging_steps",
            "3",
            "--save_steps",
            "3",
            "--num_beams",
            "2",
            "--val_max_target_length",
            "24",
            "--report_to",
            "none",
            "--num_translation_examples",
            "2",
        ]
    )
    return work, metrics


def test_prepare_then_train(pipeline_run):
    work, metrics = pipeline_run
    report = json.loads((work / "prepared" / "report.json").read_text())
    assert report["train"]["pairs_kept"] == 400 and report["train"]["alignments"] == "eflomal"
    assert 0 < report["train"]["mean_kendall_tau"] < 1  # en -> de reorders some words
    assert metrics["train_samples"] == 400 and metrics["predict_samples"] == 30
    assert {"eval_bleu", "eval_chrf", "eval_reorder_loss", "predict_bleu"} <= set(metrics)
    logs = json.loads((work / "run" / "trainer_state.json").read_text())["log_history"]
    assert all("reorder_loss" in entry and "translation_loss" in entry for entry in logs if "loss" in entry)


def test_translate_and_evaluate(pipeline_run):
    work, _ = pipeline_run
    assert (
        translate_main(
            [
                "--model",
                str(work / "run"),
                "--input",
                str(work / "test.en"),
                "--output",
                str(work / "test.hyp"),
                "--num_beams",
                "2",
                "--batch_size",
                "8",
                "--quiet",
            ]
        )
        == 0
    )
    hypotheses = (work / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 30
    assert (
        evaluate_main(
            [
                "bleu",
                "--hyp",
                str(work / "test.hyp"),
                "--ref",
                str(work / "test.de"),
                "--lang",
                "de",
                "--dataset_name",
                "Multi30k test 2016 (first 30)",
                "--dataset_type",
                "multi30k",
                "--dataset_config",
                "en-de",
                "--output",
                str(work / "bleu.json"),
            ]
        )
        == 0
    )
    scores = json.loads((work / "bleu.json").read_text())
    assert 0 <= scores["bleu"]["score"] <= 100 and scores["bleu"]["signature"].startswith("nrefs:1")


def test_card_push_and_fresh_process_pipeline(pipeline_run):
    work, _ = pipeline_run
    if not (work / "bleu.json").exists():
        test_translate_and_evaluate(pipeline_run)
    folder = work / "upload"
    shutil.copytree(work / "run", folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    entry = json.loads((work / "bleu.json").read_text())
    card_kwargs = dict(languages=["en", "de"], datasets=["multi30k"], eval_results=[entry])
    write_model_card(folder, repo_id=REPO_ID, **card_kwargs)
    card = ModelCard.load(folder / "README.md")
    assert {r.metric_type for r in card.data.eval_results} == {"bleu", "chrf"}
    assert "xlpe-combination" in card.data.tags

    with local_hub_endpoint(work / "hub") as hub:
        push_model(folder, REPO_ID, card_kwargs=card_kwargs)
    received = hub.repo_dir(REPO_ID)
    assert (
        hub.unexpected == []
        and (received / "model.safetensors").is_file()
        and (received / "modeling_xlpe.py").is_file()
    )

    sources = (work / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    local = XLPETranslationPipeline(
        model=load_pipeline(str(work / "run")).model, tokenizer=load_pipeline(str(work / "run")).tokenizer
    )
    expected = [r["translation_text"] for r in local(sources, num_beams=2, max_new_tokens=8)]
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FRESH_PROCESS_SCRIPT), str(received), *sources],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=received,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["class"] == "XLPETranslationPipeline" and result["module"].startswith("transformers_modules")
    assert [r["translation_text"] for r in result["result"]] == expected and any(expected)
