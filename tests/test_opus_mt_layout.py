"""Every command on the checkpoint layout users start from: a Helsinki-NLP OPUS-MT Marian model (MarianTokenizer
with `source.spm`/`target.spm`/`vocab.json`, `</s>` 0, `<unk>` 1, `<pad>` the last id and the decoder start,
`final_logits_bias`, OPUS-MT's generation config), in both forms: one shared vocabulary, and the `opus-mt-tc-*`
separate source and target vocabularies. The checkpoint is built locally (`xlpe.features.opus_mt_layout`), tiny
and untrained, on a slice of Multi30k de-en (the built-in synthetic corpus when ../shared is missing)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import MULTI30K_RAW, REPO_ROOT

FORMS = ("shared", "tc")
TRAIN_PAIRS, TEST_PAIRS = 80, 6
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")


def corpus_lines() -> tuple[str, str, dict[str, tuple[list[str], list[str]]]]:
    """(source language, target language, {split: (sources, targets)}): Multi30k de-en or the synthetic corpus."""
    if MULTI30K_RAW.is_dir():

        def read(name: str, lang: str, count: int) -> list[str]:
            with gzip.open(MULTI30K_RAW / f"{name}.{lang}.gz", "rt", encoding="utf-8") as handle:
                return [next(handle).rstrip("\n") for _ in range(count)]

        return (
            "de",
            "en",
            {
                "train": (read("train", "de", TRAIN_PAIRS), read("train", "en", TRAIN_PAIRS)),
                "test": (read("test_2016_flickr", "de", TEST_PAIRS), read("test_2016_flickr", "en", TEST_PAIRS)),
            },
        )
    from xlpe.features.synthetic import SOURCE_LANG, TARGET_LANG, generate_corpus

    sources, targets, _ = generate_corpus(TRAIN_PAIRS + TEST_PAIRS, seed=0)
    return (
        SOURCE_LANG,
        TARGET_LANG,
        {
            "train": (sources[:TRAIN_PAIRS], targets[:TRAIN_PAIRS]),
            "test": (sources[TRAIN_PAIRS:], targets[TRAIN_PAIRS:]),
        },
    )


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """Raw text files train.<src>/<tgt>, test.<src>/<tgt> and what they hold."""
    source_lang, target_lang, splits = corpus_lines()
    folder = tmp_path_factory.mktemp("opus_mt_corpus")
    for split, (sources, targets) in splits.items():
        (folder / f"{split}.{source_lang}").write_text("\n".join(sources) + "\n", encoding="utf-8")
        (folder / f"{split}.{target_lang}").write_text("\n".join(targets) + "\n", encoding="utf-8")
    return {"folder": folder, "source_lang": source_lang, "target_lang": target_lang, "splits": splits}


@pytest.fixture(scope="session")
def opus_mt_checkpoints(corpus, tmp_path_factory):
    """{form: directory of an OPUS-MT-style stock checkpoint}."""
    from xlpe.features.opus_mt_layout import build_opus_mt_checkpoint

    sources, targets = corpus["splits"]["train"]
    return {
        form: build_opus_mt_checkpoint(
            tmp_path_factory.mktemp(f"opus_mt_{form}"),
            sources,
            targets,
            corpus["source_lang"],
            corpus["target_lang"],
            separate_vocabs=form == "tc",
            spm_vocab_size=150,
            init_std=0.3,  # an untrained model whose outputs vary with the input
        )
        for form in FORMS
    }


def run_cli(main, argv) -> int:
    return main([str(arg) for arg in argv])


@pytest.fixture(scope="session")
def prepared(corpus, opus_mt_checkpoints, tmp_path_factory):
    """{form: `xlpe-prepare --tokenizer <checkpoint>` output}."""
    from xlpe.cli.prepare import main

    folder, src, tgt = corpus["folder"], corpus["source_lang"], corpus["target_lang"]
    outputs = {}
    for form, checkpoint in opus_mt_checkpoints.items():
        output = tmp_path_factory.mktemp(f"prepared_{form}") / "data"
        argv = [
            "--source",
            folder / f"train.{src}",
            "--target",
            folder / f"train.{tgt}",
            "--source_lang",
            src,
            "--target_lang",
            tgt,
            "--tokenizer",
            checkpoint,
            "--output",
            output,
            "--alignment_seed",
            1,
            "--eflomal_options",
            '{"n_samplers": 1}',
        ]
        assert run_cli(main, argv) == 0
        outputs[form] = output
    return outputs


TRAIN_FLAGS = [
    "--max_steps",
    2,
    "--per_device_train_batch_size",
    8,
    "--do_eval",
    "false",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
]


@pytest.fixture(scope="session")
def trained(opus_mt_checkpoints, prepared, tmp_path_factory):
    """{(form, family): an `xlpe-train --model_name_or_path <checkpoint> --model_type family` output}."""
    from xlpe.cli.train import cli

    runs = {}
    for form in FORMS:
        for family in ("xlpe", "dpe"):
            output = tmp_path_factory.mktemp(f"train_{form}_{family}")
            argv = [
                "--model_name_or_path",
                opus_mt_checkpoints[form],
                "--model_type",
                family,
                "--prepared_dataset",
                prepared[form],
                "--output_dir",
                output,
                "--overwrite_output_dir",
                *TRAIN_FLAGS,
            ]
            assert run_cli(cli, argv) == 0
            runs[form, family] = output
    return runs


def load(directory):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import xlpe  # noqa: F401  (registers the families)

    return AutoModelForSeq2SeqLM.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


# ---------------------------------------------------------------------------------------------------------
# The layout itself
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_the_fixture_has_opus_mt_layout(opus_mt_checkpoints, form):
    from transformers import AutoTokenizer, MarianTokenizer

    directory = opus_mt_checkpoints[form]
    vocab = json.loads((directory / "vocab.json").read_text())
    assert (vocab["</s>"], vocab["<unk>"], vocab["<pad>"]) == (0, 1, len(vocab) - 1)
    config = json.loads((directory / "config.json").read_text())
    pad = len(vocab) - 1
    assert config["model_type"] == "marian" and config["pad_token_id"] == config["decoder_start_token_id"] == pad
    assert (config["eos_token_id"], config["forced_eos_token_id"]) == (0, 0)
    assert config["static_position_embeddings"] and config["scale_embedding"] and not config["normalize_embedding"]
    generation = json.loads((directory / "generation_config.json").read_text())
    assert generation["bad_words_ids"] == [[pad]] and generation["renormalize_logits"] and generation["num_beams"] == 4
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert isinstance(tokenizer, MarianTokenizer) and not getattr(tokenizer, "is_fast", False)
    assert {"source.spm", "target.spm"} <= {path.name for path in directory.iterdir()}
    if form == "tc":
        target_vocab = json.loads((directory / "target_vocab.json").read_text())
        assert not config["share_encoder_decoder_embeddings"] and config["decoder_vocab_size"] == len(target_vocab)
        assert target_vocab["<pad>"] == pad and target_vocab != vocab
    else:
        assert config["share_encoder_decoder_embeddings"]


@pytest.mark.parametrize("form", FORMS)
def test_stock_upgrade_is_function_preserving(opus_mt_checkpoints, corpus, form):
    """XL PE and DPE built from the stock checkpoint translate exactly as it does (gates at 0), bias included."""
    from transformers import MarianMTModel

    from xlpe import XLPEMarianMTModel
    from xlpe.models.modeling_dpe import DPEMarianMTModel

    stock, tokenizer = load(opus_mt_checkpoints[form])
    assert isinstance(stock, MarianMTModel) and stock.final_logits_bias.abs().sum() > 0
    batch = tokenizer(corpus["splits"]["test"][0], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = stock.generate(**batch, num_beams=2, max_new_tokens=8)
        for model_class in (XLPEMarianMTModel, DPEMarianMTModel):
            model = model_class.from_pretrained(opus_mt_checkpoints[form]).eval()
            assert torch.equal(model.final_logits_bias, stock.final_logits_bias)
            assert torch.equal(model.generate(**batch, num_beams=2, max_new_tokens=8), expected), model_class


# ---------------------------------------------------------------------------------------------------------
# xlpe-prepare and the tokenizer readers
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_prepare_with_the_marian_tokenizer(prepared, opus_mt_checkpoints, corpus, form):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from xlpe.features.predicted_reordering import tokenizer_fingerprint as ids_fingerprint
    from xlpe.features.tokenization import tokenizer_fingerprint

    _, tokenizer = load(opus_mt_checkpoints[form])
    train = load_from_disk(str(prepared[form]))["train"]
    sources, targets = corpus["splits"]["train"]
    encoded = tokenizer(sources, text_target=targets)
    assert train["input_ids"] == encoded["input_ids"] and train["labels"] == encoded["labels"]  # target pieces
    assert all(len(p) == len(i) for p, i in zip(train["reorder_positions"], train["input_ids"]))
    saved = AutoTokenizer.from_pretrained(prepared[form] / "tokenizer")  # the same tokenizer, saved elsewhere
    assert tokenizer_fingerprint(saved) == tokenizer_fingerprint(tokenizer)
    assert ids_fingerprint(saved) == ids_fingerprint(tokenizer)


def test_fingerprints_tell_the_vocabularies_apart(opus_mt_checkpoints):
    from xlpe.features.predicted_reordering import tokenizer_fingerprint as ids_fingerprint
    from xlpe.features.tokenization import tokenizer_fingerprint

    shared, tc = (load(opus_mt_checkpoints[form])[1] for form in FORMS)
    assert tokenizer_fingerprint(shared) != tokenizer_fingerprint(tc)
    assert ids_fingerprint(shared) != ids_fingerprint(tc)


@pytest.mark.parametrize("form", FORMS)
def test_word_starts_come_from_the_source_vocabulary(opus_mt_checkpoints, form):
    """With separate vocabularies `convert_ids_to_tokens` reads target pieces; the reorderer ranks source words."""
    from xlpe.features.tokenization import word_start_flags

    _, tokenizer = load(opus_mt_checkpoints[form])
    pieces = {index: piece for piece, index in tokenizer.get_vocab().items()}
    assert word_start_flags(tokenizer) == [pieces.get(i, "").startswith("\u2581") for i in range(len(tokenizer))]


# ---------------------------------------------------------------------------------------------------------
# xlpe-train
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", ["xlpe", "dpe"])
def test_train_from_the_checkpoint(trained, opus_mt_checkpoints, form, family):
    stock = json.loads((opus_mt_checkpoints[form] / "config.json").read_text())
    config = json.loads((trained[form, family] / "config.json").read_text())
    assert config["model_type"] == {"xlpe": "xlpe_marian", "dpe": "dpe_marian"}[family]
    for field in ("pad_token_id", "decoder_start_token_id", "eos_token_id", "vocab_size", "decoder_vocab_size"):
        assert config[field] == stock[field], field
    assert config["share_encoder_decoder_embeddings"] == (form == "shared")
    assert (trained[form, family] / "source.spm").is_file()
    if family == "xlpe":
        model, tokenizer = load(trained[form, family])
        flags = model.get_encoder().word_starts.flags[: len(tokenizer)].tolist()
        pieces = {index: piece for piece, index in tokenizer.get_vocab().items()}
        assert flags == [pieces.get(i, "").startswith("\u2581") for i in range(len(tokenizer))]


def test_train_mvpe_pos_from_a_marian_checkpoint_is_one_line(opus_mt_checkpoints, prepared, tmp_path, capsys):
    """mvPE+POS (BART with its own positions) cannot start from a stock Marian checkpoint: exit 2, saying why."""
    from xlpe.cli.train import cli

    argv = [
        "--model_name_or_path",
        opus_mt_checkpoints["tc"],
        "--model_type",
        "mvpe_pos",
        "--prepared_dataset",
        prepared["tc"],
        "--output_dir",
        tmp_path / "run",
        *TRAIN_FLAGS,
    ]
    assert run_cli(cli, argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cannot start from" in error and "'marian'" in error and "--model_type dpe or xlpe" in error


# ---------------------------------------------------------------------------------------------------------
# Translation: xlpe-translate, the pipeline (package and remote code)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_translate_and_pipeline(trained, corpus, form, tmp_path):
    from transformers import pipeline

    from xlpe.cli.translate import main

    sources = corpus["splits"]["test"][0]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    directory = trained[form, "xlpe"]
    argv = ["--model", directory, "--input", tmp_path / "in.txt", "--output", tmp_path / "out.txt"]
    assert run_cli(main, [*argv, "--num_beams", 2, "--max_new_tokens", 8, "--quiet"]) == 0
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    model, tokenizer = load(directory)
    translator = pipeline("xlpe-translation", model=model, tokenizer=tokenizer)
    by_pipeline = [out["translation_text"] for out in translator(sources, num_beams=2, max_new_tokens=8)]
    assert lines == by_pipeline and len(set(lines)) > 1
    with torch.no_grad():  # the target side decodes with the target vocabulary
        ids = model.generate(**tokenizer(sources[:1], return_tensors="pt"), num_beams=2, max_new_tokens=8)
    assert tokenizer.batch_decode(ids, skip_special_tokens=True)[0].strip() == by_pipeline[0]


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["xlpe"] = None  # the package is NOT importable here
    from transformers import pipeline
    sources = json.loads(sys.argv[1])
    out = {}
    for directory in sys.argv[2:]:
        translator = pipeline("translation", model=directory, trust_remote_code=True)
        out[directory] = [o["translation_text"] for o in translator(sources, num_beams=2, max_new_tokens=8)]
    print(json.dumps(out))
    """
)


def test_pipeline_through_remote_code(trained, corpus):
    from transformers import pipeline

    sources = corpus["splits"]["test"][0][:2]
    directories = [str(trained[form, "xlpe"]) for form in FORMS] + [str(trained["tc", "dpe"])]
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, json.dumps(sources), *directories],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT.parent,
        timeout=300,
    )
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    for directory in directories:
        model, tokenizer = load(directory)
        local = pipeline("xlpe-translation", model=model, tokenizer=tokenizer)
        assert remote[directory] == [o["translation_text"] for o in local(sources, num_beams=2, max_new_tokens=8)]


# ---------------------------------------------------------------------------------------------------------
# xlpe-reorder train / attach
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_reorder_train_and_attach(trained, prepared, corpus, form, tmp_path):
    from xlpe.cli.reorder import main
    from xlpe.cli.translate import main as translate_main

    reorderer = tmp_path / "reorderer"
    tiny = ["--d_model", 16, "--token_layers", 1, "--word_layers", 1, "--batch_size", 16, "--epochs", 1]
    argv = ["train", "--prepared", prepared[form], "--output_dir", reorderer, "--calibration_pairs", 10, *tiny]
    assert run_cli(main, argv) == 0
    attached = tmp_path / "attached"
    assert (
        run_cli(main, ["attach", "--reorderer", reorderer, "--model", trained[form, "xlpe"], "--output_dir", attached])
        == 0
    )
    (tmp_path / "in.txt").write_text("\n".join(corpus["splits"]["test"][0]) + "\n", encoding="utf-8")
    argv = ["--model", attached, "--input", tmp_path / "in.txt", "--output", tmp_path / "out.txt", "--quiet"]
    assert run_cli(translate_main, [*argv, "--max_new_tokens", 6]) == 0
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == TEST_PAIRS


# ---------------------------------------------------------------------------------------------------------
# xlpe-export (int8, verify, translate) and xlpe-push --dry_run
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_export_verify_translate(trained, corpus, form, tmp_path):
    pytest.importorskip("onnxruntime")
    from xlpe.cli.export import main
    from xlpe.export.runtime import OnnxTranslator

    directory, export = trained[form, "xlpe"], tmp_path / "export"
    assert run_cli(main, ["--model", directory, "--output", export, "--quantize", "int8"]) == 0
    assert run_cli(main, ["--verify", export, "--model", directory]) == 0
    sources = corpus["splits"]["test"][0]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert run_cli(main, ["--translate", export, "--input", tmp_path / "in.txt", "--num_beams", 2]) == 0
    model, tokenizer = load(directory)
    translator = OnnxTranslator(export, threads=1)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    for kwargs in ({"num_beams": 1}, {"num_beams": 2}, {}):  # {}: OPUS-MT's 4 beams, renormalized, pad banned
        with torch.no_grad():
            expected = model.generate(**batch, max_new_tokens=10, **kwargs).numpy()
        actual = translator.generate(
            batch["input_ids"].numpy(), batch["attention_mask"].numpy(), max_new_tokens=10, **kwargs
        )
        assert actual.tolist() == expected.tolist(), kwargs


@pytest.mark.parametrize("form", FORMS)
def test_push_dry_run(trained, form, tmp_path):
    import shutil

    from xlpe.cli.push import main

    folder = tmp_path / "model"
    shutil.copytree(trained[form, "dpe"], folder)
    assert run_cli(main, [folder, "someone/opus-mt-xlpe", "--dry_run"]) == 0
    assert (folder / "README.md").is_file() and (folder / "source.spm").is_file()


# ---------------------------------------------------------------------------------------------------------
# CTranslate2 (xlpe-export --format ctranslate2): the stock checkpoint through CTranslate2's own converter
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_ctranslate2_export_translates_as_the_stock_model(opus_mt_checkpoints, corpus, form, tmp_path, capsys):
    """Both vocabulary layouts: the export, `--verify` against the PyTorch model (probe sentences, greedy and 4
    beams, token for token), and `--translate` giving xlpe-translate's output line for line, length rule included;
    int8 weights export and translate."""
    pytest.importorskip("ctranslate2")
    from xlpe.cli.export import main
    from xlpe.cli.translate import main as translate_main

    checkpoint, export = opus_mt_checkpoints[form], tmp_path / "ct2"
    assert run_cli(main, ["--model", checkpoint, "--output", export, "--format", "ctranslate2"]) == 0
    assert "CTranslate2 4." in capsys.readouterr().out
    vocabularies = (
        {"shared_vocabulary.json"} if form == "shared" else {"source_vocabulary.json", "target_vocabulary.json"}
    )
    assert vocabularies <= {p.name for p in export.iterdir()}
    assert run_cli(main, ["--verify", export, "--model", checkpoint]) == 0
    assert "(1-beam 100 %, 4-beam 100 % identical)" in capsys.readouterr().out
    sources = corpus["splits"]["test"][0]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    outputs = {}
    for name, command in (
        ("ct2", [main, "--translate", export, "--input", tmp_path / "in.txt", "--num_beams", 2, "--batch_size", 3]),
        (
            "ct2-streams",
            [main, "--translate", export, "--input", tmp_path / "in.txt", "--num_beams", 2, "--batch_size", 3]
            + ["--threads", 2, "--streams", 2],
        ),  # CTranslate2's inter_threads: each batch as alone
        ("torch", [translate_main, "--model", checkpoint, "--input", tmp_path / "in.txt", "--num_beams", 2]),
    ):
        capsys.readouterr()
        assert run_cli(command[0], command[1:]) == 0
        outputs[name] = capsys.readouterr().out.splitlines()
    assert outputs["ct2"] == outputs["torch"] == outputs["ct2-streams"] and len(outputs["ct2"]) == len(sources)
    int8 = tmp_path / "ct2-int8"
    assert (
        run_cli(main, ["--model", checkpoint, "--output", int8, "--format", "ctranslate2", "--quantize", "int8"]) == 0
    )
    assert run_cli(main, ["--verify", int8, "--model", checkpoint]) == 0  # int8: the identical share is reported
    assert "identical" in capsys.readouterr().out


def test_ctranslate2_export_refuses_what_it_cannot_represent(trained, opus_mt_checkpoints, tmp_path, capsys):
    """One line, exit 2: an xlpe family (positions CTranslate2 has no input for); a stock model whose <pad>
    embedding (the decoder's start) moved in fine-tuning (CTranslate2 starts from a zero embedding); ONNX flags."""
    pytest.importorskip("ctranslate2")
    from transformers import MarianMTModel

    from xlpe.cli.export import main

    assert (
        run_cli(main, ["--model", trained["shared", "xlpe"], "--output", tmp_path / "a", "--format", "ctranslate2"])
        == 2
    )
    assert "converts a stock MarianMT model (model_type 'marian'), not 'xlpe_marian'" in capsys.readouterr().err
    moved = tmp_path / "moved"
    model = MarianMTModel.from_pretrained(opus_mt_checkpoints["shared"])
    with torch.no_grad():
        model.get_input_embeddings().weight[model.config.pad_token_id] += 0.01
    model.save_pretrained(moved)
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        (moved / name).write_bytes((opus_mt_checkpoints["shared"] / name).read_bytes())
    capsys.readouterr()
    assert run_cli(main, ["--model", moved, "--output", tmp_path / "b", "--format", "ctranslate2"]) == 2
    error = capsys.readouterr().err
    assert "<pad> embedding" in error and "is not zero" in error and len(error.strip().splitlines()) == 1
    argv = ["--model", opus_mt_checkpoints["shared"], "--output", tmp_path / "c", "--format", "ctranslate2"]
    assert run_cli(main, [*argv, "--quantize", "int8", "--int8_scheme", "tensor"]) == 2
    assert "--int8_scheme applies to ONNX exports" in capsys.readouterr().err
