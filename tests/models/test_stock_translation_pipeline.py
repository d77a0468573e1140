"""`pipeline("translation", model=dir, trust_remote_code=True)` for stock models (transformers 5 has no
"translation" task of its own): a MarianMT run of `xlpe-train --model_type vanilla`, an OPUS-MT checkpoint in both
vocabulary forms after `copy_with_translation_pipeline` (`python -m xlpe.cli.add_pipeline`), a BART after
`add_translation_pipeline`. Each translates in a fresh process where xlpe cannot be imported, token for token as
the package's pipeline in memory (the length rule included); the source folder of a copy is left unchanged, and
what cannot carry the pipeline is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL_ARGS
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, BartConfig, BartForConditionalGeneration

from xlpe.cli.add_pipeline import main as add_pipeline_main
from xlpe.features.outputs import OutputRefused
from xlpe.features.pipeline_copy import copy_with_translation_pipeline
from xlpe.features.text_files import OutputExistsError
from xlpe.models.hub_support import add_translation_pipeline
from xlpe.models.pipeline_translation import TRANSLATION_PIPELINE_ENTRY, XLPETranslationPipeline

SOURCES = ["the cat sees the dog", "a dog chases the small cat in the garden"]
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
CODE_FILES = ("pipeline_translation.py", "length_rule.py", "length_limits.py")

# A fresh interpreter where `import xlpe` fails: only the folder's own code files can serve the pipeline.
FRESH_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["xlpe"] = None  # the package is NOT importable here
    from transformers import pipeline
    sources = json.loads(sys.argv[1])
    out = {}
    for directory in sys.argv[2:]:
        translator = pipeline("translation", model=directory, trust_remote_code=True)
        out[directory] = {
            "class": type(translator).__name__,
            "module": type(translator).__module__,
            "beam": translator(sources, num_beams=2, max_new_tokens=6),
            "rule": translator(sources, num_beams=1, return_limits=True),
        }
    print(json.dumps(out))
    """
)


def in_memory(directory) -> dict:
    """What the package's own pipeline gives on the folder's model, for the calls of FRESH_SCRIPT."""
    model = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    translator = XLPETranslationPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(directory))
    return {
        "beam": translator(SOURCES, num_beams=2, max_new_tokens=6),
        "rule": translator(SOURCES, num_beams=1, return_limits=True),
    }


def translate_without_the_package(tmp_path, *directories) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", FRESH_SCRIPT, json.dumps(SOURCES), *map(str, directories)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def assert_carries_the_pipeline(directory: Path) -> None:
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    assert config["custom_pipelines"]["translation"] == TRANSLATION_PIPELINE_ENTRY
    package = Path(XLPETranslationPipeline.__module__.replace(".", "/")).parent
    for name in CODE_FILES:
        assert (directory / name).read_bytes() == (Path(__file__).parents[2] / package / name).read_bytes()


def assert_same_as_in_memory(results: dict, directory: Path) -> None:
    result, expected = results[str(directory)], in_memory(directory)
    assert result["class"] == "XLPETranslationPipeline" and result["module"].startswith("transformers_modules")
    assert result["beam"] == expected["beam"] and result["rule"] == expected["rule"]
    assert all("output_at_limit" in item for item in result["rule"])  # the length rule's report


def folder_bytes(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------
# Stock models: an xlpe-train run, OPUS-MT checkpoints (a copy), a BART
# ---------------------------------------------------------------------------------------------------------


def test_stock_run_of_xlpe_train_translates_without_the_package(tmp_path):
    from xlpe.training.run import main

    run = tmp_path / "vanilla"
    main(
        [
            "--output_dir",
            str(run),
            "--cache_dir",
            str(tmp_path / "cache"),
            *TINY_MODEL_ARGS,
            "--model_type",
            "vanilla",
            "--do_train",
            "--max_steps",
            "2",
            "--max_train_samples",
            "32",
            "--tokenizer_vocab_size",
            "200",
            "--per_device_train_batch_size",
            "8",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
        ]
    )
    assert json.loads((run / "config.json").read_text())["model_type"] == "marian" and "auto_map" not in (
        json.loads((run / "config.json").read_text())
    )
    assert_carries_the_pipeline(run)
    assert_same_as_in_memory(translate_without_the_package(tmp_path, run), run)
    # what xlpe-push checks: a stock model type needs no auto_map (it loads without custom code); the pipeline is
    # there, and so is the card of the stock run: nothing is missing
    from xlpe.training.push import check_upload_folder

    assert check_upload_folder(run) == [] and "stock MarianMT architecture" in (run / "README.md").read_text()


@pytest.fixture(scope="module")
def opus_mt(tmp_path_factory):
    """{form: an OPUS-MT-layout stock checkpoint (shared vocabulary; opus-mt-tc separate vocabularies)}."""
    from xlpe.features.opus_mt_layout import build_opus_mt_checkpoint
    from xlpe.features.synthetic import generate_corpus

    sources, targets, _ = generate_corpus(60, seed=0)
    return {
        form: build_opus_mt_checkpoint(
            tmp_path_factory.mktemp(f"opus_mt_{form}"),
            sources,
            targets,
            "en",
            "de",
            separate_vocabs=form == "tc",
            spm_vocab_size=120,
            init_std=0.3,  # an untrained model whose outputs vary with the input
        )
        for form in ("shared", "tc")
    }


def test_opus_mt_copy_translates_without_the_package_and_leaves_the_source(opus_mt, tmp_path):
    before = {form: folder_bytes(source) for form, source in opus_mt.items()}
    copies = {form: tmp_path / f"opus-mt-{form}" for form in opus_mt}
    copy_with_translation_pipeline(opus_mt["shared"], copies["shared"])
    argv = [str(opus_mt["tc"]), str(copies["tc"])]  # the command does the same
    assert add_pipeline_main(argv) == 0
    for form, source in opus_mt.items():
        assert folder_bytes(source) == before[form]  # the input is only read
        assert "custom_pipelines" not in json.loads((source / "config.json").read_text())
        assert_carries_the_pipeline(copies[form])
        assert {*folder_bytes(source), *CODE_FILES} == set(folder_bytes(copies[form]))  # nothing else changed
    results = translate_without_the_package(tmp_path, *copies.values())
    for directory in copies.values():
        assert_same_as_in_memory(results, directory)
    assert results[str(copies["shared"])]["beam"] != results[str(copies["tc"])]["beam"]  # two models


def test_bart_translates_without_the_package(toy_tokenizer, tmp_path):
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=len(toy_tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        bos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.eos_token_id,
        forced_eos_token_id=toy_tokenizer.eos_token_id,
        init_std=0.3,
    )
    folder = tmp_path / "bart"
    BartForConditionalGeneration(config).save_pretrained(folder)
    toy_tokenizer.save_pretrained(folder)
    assert add_translation_pipeline(folder) is True
    assert add_translation_pipeline(folder) is False  # once is enough: nothing written again
    assert_carries_the_pipeline(folder)
    assert_same_as_in_memory(translate_without_the_package(tmp_path, folder), folder)


def test_a_family_folder_already_carries_it(toy_tokenizer, tmp_path):
    from family_tester import registry_family_tests

    model = registry_family_tests("xlpe")().make_model(toy_tokenizer)
    model.save_pretrained(tmp_path / "xlpe"), toy_tokenizer.save_pretrained(tmp_path / "xlpe")
    before = folder_bytes(tmp_path / "xlpe")
    assert add_translation_pipeline(tmp_path / "xlpe") is False and folder_bytes(tmp_path / "xlpe") == before
    assert_carries_the_pipeline(tmp_path / "xlpe")


# ---------------------------------------------------------------------------------------------------------
# What cannot carry it, and where a copy may not go
# ---------------------------------------------------------------------------------------------------------


def test_refusals_name_the_folder(opus_mt, tmp_path):
    source = opus_mt["shared"]
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=r"bert: model_type 'bert' is not a sequence-to-sequence model"):
        add_translation_pipeline(bert)
    with pytest.raises(ValueError, match=r"empty: no config.json"):
        (tmp_path / "empty").mkdir()
        add_translation_pipeline(tmp_path / "empty")
    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_bytes((source / "config.json").read_bytes())
    with pytest.raises(ValueError, match=r"no_tokenizer: no tokenizer"):
        add_translation_pipeline(no_tokenizer)
    other = copy_with_translation_pipeline(source, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    config["custom_pipelines"]["translation"]["impl"] = "theirs.TheirPipeline"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"already has another translation pipeline.*theirs.TheirPipeline"):
        add_translation_pipeline(other)
    # the copy's destination: the output rule of every command
    with pytest.raises(OutputRefused, match="lies inside the source directory"):
        copy_with_translation_pipeline(source, source / "copy")
    with pytest.raises(OutputRefused, match="is the source directory"):
        copy_with_translation_pipeline(source, source, overwrite=True)
    with pytest.raises(OutputExistsError, match="pass --overwrite_output"):
        copy_with_translation_pipeline(source, tmp_path / "bert")
    with pytest.raises(OutputRefused, match="holds 1 entry that no xlpe command wrote"):
        (tmp_path / "notes").mkdir(), (tmp_path / "notes" / "a.txt").write_text("mine")
        copy_with_translation_pipeline(source, tmp_path / "notes", overwrite=True)
    assert copy_with_translation_pipeline(source, other, overwrite=True) == other  # a model: replaced when asked
    assert_carries_the_pipeline(other)
    assert not list(tmp_path.glob(".*partial*"))  # no staging folder left behind


def test_the_command_is_one_line_on_bad_input(opus_mt, tmp_path, capsys):
    assert add_pipeline_main([str(tmp_path / "missing"), str(tmp_path / "copy")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"python -m xlpe.cli.add_pipeline: error: source {tmp_path / 'missing'}: no such local directory "
        "(a saved model folder is expected)"
    )
    assert add_pipeline_main([str(opus_mt["shared"]), str(opus_mt["shared"] / "copy")]) == 2
    assert "lies inside the source directory" in capsys.readouterr().err
    assert not (tmp_path / "copy").exists() and not (opus_mt["shared"] / "copy").exists()
