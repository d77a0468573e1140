"""Model cards and the Hub upload, offline: `xlpe-push` against a local Hub endpoint (tests/local_hub.py), the
exact set of files it receives, the card's metadata, and the received folder loaded in a fresh process with
`pipeline("translation", ..., trust_remote_code=True)`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from local_hub import FRESH_PROCESS_SCRIPT, local_hub_endpoint
from transformers.dynamic_module_utils import get_relative_import_files

import xlpe
from xlpe import XLPEMarianConfig, XLPEMarianMTModel, XLPETranslationPipeline
from xlpe.cli.push import main as push_main
from xlpe.evaluation import corpus_bleu_chrf
from xlpe.training.model_card import build_model_card, evaluation_entry, variant_settings
from xlpe.training.push import check_upload_folder, prepare_upload_folder

TINY = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
)
REPO_ID = "xlpe-tests/xlpe-tiny-en-de"
NON_CODE_FILES = {
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}
SENTENCE = "the cat sees the dog"


def expected_code_files() -> set[str]:
    """configuration + modeling files of the family and, recursively, the siblings they import."""
    package = Path(xlpe.__file__).parent / "models"
    files = {"configuration_xlpe.py", "modeling_xlpe.py"}
    for name in list(files):
        files |= {Path(p).name for p in get_relative_import_files(str(package / name))}
    return files


def make_model(tokenizer, **overrides):
    torch.manual_seed(0)
    config = XLPEMarianConfig(
        **{**TINY, **overrides},
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return XLPEMarianMTModel(config).eval()


@pytest.fixture(scope="module")
def model_dir(toy_tokenizer, tmp_path_factory):
    """A saved model + tokenizer, as training leaves it (no card yet)."""
    directory = tmp_path_factory.mktemp("trained")
    make_model(toy_tokenizer).save_pretrained(directory)
    toy_tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def eval_entry():
    scores = corpus_bleu_chrf(["die katze sieht den hund", "ein hund"], ["die katze sieht den hund", "ein hund jagt"])
    return evaluation_entry(scores, "Multi30k test 2016", "bentrevett/multi30k", "test", "en-de")


# ---------------------------------------------------------------------------------------------------------
# The card
# ---------------------------------------------------------------------------------------------------------


def test_card_metadata_and_sections(model_dir, eval_entry, tmp_path):
    card = build_model_card(
        model_dir,
        repo_id=REPO_ID,
        languages=["en", "de"],
        datasets=["bentrevett/multi30k"],
        base_model="Helsinki-NLP/opus-mt-en-de",
        eval_results=[eval_entry],
        training={"learning_rate": 5e-4, "num_train_epochs": 2},
    )
    card.save(tmp_path / "README.md")
    data = ModelCard.load(tmp_path / "README.md").data  # fails loudly on a malformed model-index
    assert data.language == ["en", "de"] and data.license is None  # none given: none stated
    assert "license:" not in (tmp_path / "README.md").read_text() and "| License |" not in card.text
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.base_model == "Helsinki-NLP/opus-mt-en-de" and data.datasets == ["bentrevett/multi30k"]
    assert {"xlpe", "xlpe-combination", "xlpe_marian", "translation"} <= set(data.tags)
    results = {r.metric_type: r for r in data.eval_results}
    assert set(results) == {"bleu", "chrf"}
    assert results["bleu"].metric_value == round(eval_entry["bleu"]["score"], 2)
    assert results["bleu"].metric_config == eval_entry["bleu"]["signature"]
    assert results["chrf"].metric_config.startswith("nrefs:1|case:mixed|eff:yes|nc:6")
    assert results["bleu"].task_type == "translation" and results["bleu"].dataset_split == "test"
    assert results["bleu"].dataset_config == "en-de"
    text = card.text
    assert f'pipeline("translation", model="{REPO_ID}", trust_remote_code=True)' in text
    assert "HeadXL" in text and '| `xl_strategy` | `"combination"` |' in text
    assert "nrefs:1\\|case:mixed" in text  # the signature in the table, pipes escaped
    assert "learning_rate" in text and "Ding" in text


@pytest.mark.parametrize("strategy,heads", [("in", 0), ("head", 2), ("none", 0)])
def test_card_of_in_memory_model_reads_variant_from_config(toy_tokenizer, strategy, heads):
    model = make_model(toy_tokenizer, xl_strategy=strategy, xl_heads=heads)
    card = build_model_card(model, repo_id="me/m", languages="en")
    assert f"xlpe-{strategy}" in card.data.tags and card.data.language == ["en"]
    assert card.data.eval_results is None and "No evaluation results" in card.text
    assert variant_settings(model.config)["xl_heads"] == heads
    assert f"| Parameters | {sum(p.numel() for p in model.parameters()):,} |" in card.text


def test_card_of_every_family(toy_tokenizer):
    special = dict(
        vocab_size=len(toy_tokenizer),
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
    )
    dpe = xlpe.DPEMarianMTModel(xlpe.DPEMarianConfig(**TINY, **special))
    mvpe = xlpe.MvPEPosForConditionalGeneration(
        xlpe.MvPEPosConfig(**TINY, **special, bos_token_id=None, pos_dim=8, decoder_tagger_hidden_size=32)
    )
    cases = ((dpe, "dpe", None, "DPE block"), (mvpe, "mvpe_pos", "mvpe_pos-pos-both", "part-of-speech"))
    for model, family, variant_tag, section in cases:
        card = build_model_card(model, repo_id="me/m", languages=["en", "zh"])
        assert {"xlpe", family, model.config.model_type} <= set(card.data.tags)
        assert variant_tag is None or variant_tag in card.data.tags
        assert section in card.text and "trust_remote_code=True" in card.text
        assert set(variant_settings(model.config)) <= set(model.config.to_dict())


def test_eval_entry_without_dataset_is_rejected(model_dir):
    with pytest.raises(ValueError, match="dataset_name"):
        build_model_card(model_dir, eval_results={"bleu": {"score": 1.0, "signature": "x"}})


# ---------------------------------------------------------------------------------------------------------
# Completing the folder before the upload
# ---------------------------------------------------------------------------------------------------------


def test_check_and_repair_of_the_upload_folder(model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    assert check_upload_folder(folder) == ["README.md (model card) is missing"]
    (folder / "modeling_xlpe.py").unlink()
    config = json.loads((folder / "config.json").read_text())
    del config["custom_pipelines"]
    (folder / "config.json").write_text(json.dumps(config))
    problems = check_upload_folder(folder)
    assert "modeling_xlpe.py is missing" in problems and any("custom_pipelines" in p for p in problems)
    prepare_upload_folder(folder, {"repo_id": "me/m", "languages": ["en", "de"]})  # re-saves, writes the card
    assert check_upload_folder(folder) == []
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="tokenizer is missing"):
        prepare_upload_folder(folder)


# ---------------------------------------------------------------------------------------------------------
# Upload to a local Hub endpoint, then load what it received in a fresh process
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uploaded(model_dir, eval_entry, tmp_path_factory):
    """`xlpe-push` with the Hub endpoint (what HF_ENDPOINT sets) pointing at a LocalHub."""
    work = tmp_path_factory.mktemp("push")
    folder = work / "model"
    shutil.copytree(model_dir, folder)
    (work / "bleu.json").write_text(json.dumps(eval_entry))
    with local_hub_endpoint(work / "hub") as hub:
        assert (
            push_main(
                [
                    str(folder),
                    REPO_ID,
                    "--language",
                    "en",
                    "de",
                    "--dataset",
                    "bentrevett/multi30k",
                    "--license",
                    "apache-2.0",
                    "--eval_results",
                    str(work / "bleu.json"),
                ]
            )
            == 0
        )
    return hub, folder, hub.repo_dir(REPO_ID)


def test_dry_run_lists_exactly_what_the_upload_sends(uploaded, capsys, tmp_path):
    _, folder, received = uploaded
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    (copy / "checkpoint-2").mkdir()
    (copy / "checkpoint-2" / "optimizer.pt").write_bytes(b"x")  # a training leftover: never uploaded
    capsys.readouterr()
    assert push_main([str(copy), REPO_ID, "--language", "en", "de", "--dry_run"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["ready"] and listed["left_out"] == 1
    assert set(listed["files"]) == {p.name for p in received.iterdir()}


def test_push_uploads_exactly_the_model_files(uploaded):
    hub, folder, received = uploaded
    assert hub.unexpected == []
    assert list(hub.repos) == [REPO_ID] and len(hub.commits) == 1
    names = {p.name for p in received.iterdir()}
    code = expected_code_files()
    assert {"configuration_xlpe.py", "modeling_xlpe.py", "pipeline_translation.py"} <= code
    assert names == NON_CODE_FILES | code
    for name in names - {"README.md"}:
        assert (received / name).read_bytes() == (folder / name).read_bytes(), name
    assert any(path.endswith(".git/info/lfs/objects/batch") for _, path in hub.requests)  # weights went by LFS
    config = json.loads((received / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_xlpe.XLPEMarianMTModel"
    assert config["auto_map"]["AutoConfig"] == "configuration_xlpe.XLPEMarianConfig"
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.XLPETranslationPipeline"


def test_pushed_card_metadata(uploaded, eval_entry):
    _, _, received = uploaded
    card = ModelCard.load(received / "README.md")
    data = card.data
    assert data.language == ["en", "de"] and data.license == "apache-2.0"  # (given to xlpe-push)
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert {"xlpe", "xlpe-combination"} <= set(data.tags) and data.base_model is None
    assert data.model_name == REPO_ID
    metrics = {r.metric_type: (r.metric_value, r.metric_config, r.dataset_name) for r in data.eval_results}
    bleu = eval_entry["bleu"]
    assert metrics["bleu"] == (round(bleu["score"], 2), bleu["signature"], "Multi30k test 2016")
    assert metrics["chrf"][1] == eval_entry["chrf"]["signature"]
    assert "trust_remote_code=True" in card.text


def test_received_folder_translates_in_a_fresh_process(uploaded, toy_tokenizer):
    _, folder, received = uploaded
    model = XLPEMarianMTModel.from_pretrained(folder).eval()
    expected = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)(SENTENCE, num_beams=2, max_new_tokens=6)
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FRESH_PROCESS_SCRIPT), str(received), SENTENCE],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=received,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["class"] == "XLPETranslationPipeline"
    assert result["module"].startswith("transformers_modules")
    assert result["result"] == expected


# ---------------------------------------------------------------------------------------------------------
# The card of a training run: validation + test scores with signatures, recipe, settings, data, reorderer
# ---------------------------------------------------------------------------------------------------------


def test_training_card_has_scores_signatures_data_and_a_correct_loading_example(toy_tokenizer, tmp_path):
    from types import SimpleNamespace

    from xlpe.training.model_card import write_training_card
    from xlpe.training.run_config import RunConfig

    model = make_model(toy_tokenizer)
    model.config.reorderer_config = {
        "decoder": "btg",
        "d_model": 64,
        "training_loss": "btg_crf",
        "evaluation": {"kendall_tau": 0.71},
    }
    model.save_pretrained(tmp_path)
    test_scores = corpus_bleu_chrf(["die katze sieht den hund"], ["die katze sieht den hund"], "de")
    (tmp_path / "test_scores.json").write_text(json.dumps(test_scores))
    (tmp_path / "preparation_report.json").write_text(
        json.dumps(
            {
                "train": {"pairs_read": 1200, "pairs_kept": 1190, "pairs_skipped": {"too_long": 10}},
                "validation": {"pairs_read": 50, "pairs_kept": 50, "pairs_skipped": {}},
            }
        )
    )
    model_args = SimpleNamespace(model_name_or_path=None)
    data_args = SimpleNamespace(
        dataset_name="builtin:synthetic",
        train_file=None,
        train_source_file=None,
        prepared_dataset=None,
        source_lang="en",
        target_lang="de",
        bleu_tokenize="13a",
        max_source_length=64,
        max_target_length=64,
        num_beams=4,
        uses_builtin_corpus=lambda: True,
    )
    training_args = SimpleNamespace(learning_rate=2e-3, max_steps=800, seed=1, recipe=None)
    run = RunConfig(model_args, data_args, training_args)
    write_training_card(tmp_path, run, {"eval_bleu": 31.25, "eval_chrf": 55.5})
    card = ModelCard.load(tmp_path / "README.md")
    results = card.data.eval_results
    by_split = {(r.dataset_split, r.metric_type): r for r in results}
    assert by_split[("validation", "bleu")].metric_value == 31.25
    assert by_split[("validation", "bleu")].metric_config == test_scores["bleu"]["signature"]  # same metric settings
    assert by_split[("test", "chrf")].metric_config == test_scores["chrf"]["signature"]
    text = card.text
    assert "No evaluation results" not in text
    assert "| builtin:synthetic | validation |  | BLEU | 31.25 |" in text
    assert "tok:13a" in text and "| train | 1,200 | 1,190 | 10 |" in text
    assert (
        "Recipe: `builtin" in text and "| learning_rate | `0.002` |" in text and "| max_source_length | `64` |" in text
    )
    assert "`evaluation.kendall_tau` = 0.71" in text and '| `training_loss` | `"btg_crf"` |' in text
    assert (
        'AutoTokenizer.from_pretrained("builtin:synthetic", trust_remote_code=True)' not in text
    )  # repo id = dir name
    assert f'AutoTokenizer.from_pretrained("{tmp_path.name}", trust_remote_code=True)' in text
    assert f'pipeline("translation", model="{tmp_path.name}", trust_remote_code=True)' in text


def test_card_says_when_no_kendall_tau_is_recorded(toy_tokenizer):
    model = make_model(toy_tokenizer)
    model.config.reorderer_config = {"decoder": "rank", "d_model": 32}
    text = build_model_card(model).text
    assert "No Kendall tau is recorded in this checkpoint" in text and '| `decoder` | `"rank"` |' in text
    assert "Test-time reorderer" not in build_model_card(make_model(toy_tokenizer)).text


def test_saved_weights_follow_the_umask(toy_tokenizer, tmp_path):
    """safetensors writes through a private temporary file (0600); the saved model follows the umask instead."""
    old = os.umask(0o022)
    try:
        make_model(toy_tokenizer).save_pretrained(tmp_path / "model")
    finally:
        os.umask(old)
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "model").iterdir()}
    assert modes["model.safetensors"] == 0o644 and modes["config.json"] == 0o644


@pytest.mark.parametrize("stock", ["marian", "bart"])
def test_card_of_a_stock_model_names_its_architecture(stock, tmp_path):
    """A stock MarianMT (an OPUS-MT checkpoint fine-tuned, `--model_type vanilla`) or BART: a card of the stock
    architecture, with no xlpe family section, no predicted positions, no license nobody gave."""
    from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

    sizes = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2)
    sizes.update(decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, vocab_size=40)
    sizes.update(max_position_embeddings=64, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    model_class, config_class, title = {
        "marian": (MarianMTModel, MarianConfig, "MarianMT"),
        "bart": (BartForConditionalGeneration, BartConfig, "BART"),
    }[stock]
    model_class(config_class(**sizes)).save_pretrained(tmp_path)
    card = build_model_card(tmp_path, repo_id="me/stock", languages=["en", "de"], training={"learning_rate": 1e-3})
    assert f"| Model family | stock {title} architecture (`model_type: {stock}`)" in card.text
    assert f"The stock {title} architecture of 🤗 Transformers, unchanged" in card.text
    assert "HeadXL" not in card.text and "Predicted positions" not in card.text and "| License |" not in card.text
    assert card.data.license is None and stock in card.data.tags and "xlpe_marian" not in card.data.tags
    assert "| learning_rate | `0.001` |" in card.text
