"""ONNX export and inference from the export (xlpe.export, xlpe-export): every family and position option exports,
reloads and generates token-identically to PyTorch `generate` (greedy and beam); raw text translates as the
translation pipeline does; an attached reorderer runs in the front end; int8 copies are written and run; bad input
is refused by name. Tiny random models (tests/models/test_generation_consistency.py's stacks): seconds each."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from conftest import REPO_ROOT, save_tiny_xlpe_model

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

sys.path.insert(0, str(REPO_ROOT / "tests" / "models"))
from test_generation_consistency import EOS, PAD, STACKS, VOCAB, build

from xlpe.export.exporter import check_exportable, export_directory, export_model, verify_export
from xlpe.export.manifest import MANIFEST_FILE
from xlpe.export.runtime import OnnxTranslator
from xlpe.export.search import SearchSettings
from xlpe.models.registry import MODEL_FAMILIES


@pytest.fixture(scope="module")
def stack_tokenizer():
    """A tokenizer for the stacks' manifests (ids only matter to the fingerprint here: inputs are token ids)."""
    from conftest import TOY_SENTENCES

    from xlpe.features.tokenization import train_joint_tokenizer

    return train_joint_tokenizer(TOY_SENTENCES * 4, vocab_size=VOCAB)


def random_batches(source: dict, seed: int, count: int = 2):
    """Right-padded random batches of varying length (rows of other lengths), with tags when the stack reads them."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        length = int(torch.randint(3, 12, (1,), generator=generator))
        ids = torch.randint(3, VOCAB, (4, length), generator=generator)
        lengths = torch.randint(2, length + 1, (4,), generator=generator)
        lengths[0] = length
        for row, row_length in enumerate(lengths.tolist()):
            ids[row, row_length - 1], ids[row, row_length:] = EOS, PAD
        batch = {"input_ids": ids, "attention_mask": ids.ne(PAD).long()}
        if "pos_tag_ids" in source:
            tags = int(source["pos_tag_ids"].max()) + 1
            batch["pos_tag_ids"] = torch.randint(3, tags, ids.shape, generator=generator).masked_fill(ids.eq(PAD), 0)
        yield batch, int(torch.randint(3, 16, (1,), generator=generator))


def assert_same_generation(model, translator, source, seed=1, beams=(1, 3), **extra):
    for batch, new_tokens in random_batches(source, seed):
        for num_beams in beams:
            kwargs = dict(num_beams=num_beams, max_new_tokens=new_tokens, **extra)
            with torch.no_grad():
                expected = model.generate(**batch, **kwargs).numpy()
            actual = translator.generate(**{k: v.numpy() for k, v in batch.items()}, **kwargs)
            assert actual.tolist() == expected.tolist(), (num_beams, new_tokens)


# every registered family and every option at least once (CI time); XLPE_EXPORT_ALL_STACKS=1 runs all of them
# (measured: all pass)
COVERING = (
    *MODEL_FAMILIES,
    "xlpe-inxl",
    "xlpe-combination+relative",
    "xlpe-combination+directional",
    "xlpe-combination+source-tags",
    "marian-relative-only-no-absolute",
    "dpe+relative+directional",
    "dpe+source-tags",
    "mvpe_pos-decoder-tags-learned",
    "xlpe-xl-rotary+rotary-no-absolute",
)


@pytest.mark.parametrize("name", sorted(STACKS) if os.environ.get("XLPE_EXPORT_ALL_STACKS") else COVERING)
def test_every_stack_exports_and_generates_as_pytorch(name, stack_tokenizer, tmp_path):
    model, source = build(name)
    manifest = export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert model.config.check_inputs and not model.training  # restored after the export
    translator = OnnxTranslator(tmp_path / "onnx", threads=1)
    assert_same_generation(model, translator, source)
    layout = manifest["layout"]
    config = model.config
    assert layout["source_tags"] == config.uses_extra_input("pos_tag_ids")
    decoder_tags = config.uses_extra_input("decoder_pos_tag_ids") and hasattr(config, "decoder_tagger_window")
    assert layout["tagger_window"] == (config.decoder_tagger_window if decoder_tags else 0)
    assert layout["predicted_positions"] == bool(getattr(config, "uses_xl", False))  # XL PE's predictor in the graph


def test_length_penalty_early_stopping_min_tokens_and_bad_words(stack_tokenizer, tmp_path):
    model, source = build("xlpe-combination")
    export_model(model, stack_tokenizer, tmp_path / "onnx")
    translator = OnnxTranslator(tmp_path / "onnx", threads=1)
    for extra in (
        {"length_penalty": 0.6, "early_stopping": True},
        {"length_penalty": 2.0, "early_stopping": "never"},
        {"min_new_tokens": 4, "bad_words_ids": [[5], [7]]},
        {"forced_eos_token_id": EOS},
    ):
        assert_same_generation(model, translator, source, seed=3, beams=(1, 4), **extra)


def test_stock_marian_and_attached_reorderer(stack_tokenizer, tmp_path):
    from transformers import MarianConfig, MarianMTModel

    model, source = build("xlpe-combination")
    reorderer = tiny_reorderer(VOCAB, PAD, EOS, seed=3, max_source_positions=24, max_words=20)
    model.attach_reorderer(reorderer)
    manifest = export_model(model, stack_tokenizer, tmp_path / "reordered")
    assert manifest["front_end"]["reorderer"] == "reorderer" and manifest["layout"]["reorder_positions"]
    assert_same_generation(model, OnnxTranslator(tmp_path / "reordered", threads=1), source)

    torch.manual_seed(0)
    stock = MarianMTModel(
        MarianConfig(
            **{
                k: v
                for k, v in model.config.to_dict().items()
                if k in MarianConfig().to_dict() and not k.startswith("_")
            }
        )
    ).eval()
    export_model(stock, stack_tokenizer, tmp_path / "stock")
    assert_same_generation(stock, OnnxTranslator(tmp_path / "stock", threads=1), source)


def test_raw_text_translation_int8_and_cli(toy_tokenizer, tmp_path, capsys):
    from xlpe import XLPETranslationPipeline
    from xlpe.cli.export import main
    from xlpe.evaluation.model_loading import load_model_and_tokenizer

    model_dir = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    assert main(["--model", str(model_dir), "--output", str(tmp_path / "onnx"), "--quantize", "int8"]) == 0
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    pipeline = XLPETranslationPipeline(model=model, tokenizer=tokenizer)
    texts = ["the cat sees the dog", "a dog chases the small cat", "die katze"]
    translator = OnnxTranslator(tmp_path / "onnx", threads=1)
    for num_beams in (1, 3):
        expected = [r["translation_text"].strip() for r in pipeline(texts, num_beams=num_beams, batch_size=len(texts))]
        assert translator.translate(texts, num_beams=num_beams) == expected
    int8 = OnnxTranslator(tmp_path / "onnx", precision="int8", threads=2, spin_wait=False)
    assert len(int8.translate(texts)) == 3
    manifest = json.loads((tmp_path / "onnx" / MANIFEST_FILE).read_text())
    for name in manifest["graphs"]:  # int8 weights: the quantized graph is smaller
        assert (tmp_path / "onnx" / name.replace(".onnx", "_int8.onnx")).stat().st_size < (
            tmp_path / "onnx" / name
        ).stat().st_size
    assert {
        i.op_type for i in __import__("onnx").load(str(tmp_path / "onnx" / "decoder_model_int8.onnx")).graph.node
    } & {"MatMulInteger", "DynamicQuantizeLinear"}
    assert verify_export(tmp_path / "onnx", model_dir)["model"]["model_type"] == "xlpe_marian"
    source = tmp_path / "source.txt"
    source.write_text("".join(text + "\n" for text in [texts[2], "", *texts[:2]]), encoding="utf-8")
    capsys.readouterr()
    assert (
        main(["--translate", str(tmp_path / "onnx"), "--input", str(source), "--num_beams", "3", "--threads", "1"]) == 0
    )
    expected = translator.translate(texts, num_beams=3)
    assert capsys.readouterr().out.split("\n")[:4] == [expected[2], "", *expected[:2]]
    # the batch-invariant mode (docs/deployment.md): with --batch_size 1 each int8 line is that line translated alone
    alone = [int8.translate([text], num_beams=3)[0] for text in (texts[2], *texts[:2])]
    argv = ["--translate", str(tmp_path / "onnx"), "--input", str(source), "--num_beams", "3", "--threads", "2"]
    assert main([*argv, "--precision", "int8", "--batch_size", "1"]) == 0
    assert capsys.readouterr().out.split("\n")[:4] == [alone[0], "", *alone[1:]]


def test_raw_text_with_source_pos_tags(toy_tokenizer, shared_dir, tmp_path):
    """mvPE+POS tags raw source text in the front end with the model's own tagger (NLTK's, from the shared data)."""
    from xlpe import (
        MvPEPosConfig,
        MvPEPosForConditionalGeneration,
        XLPETranslationPipeline,
    )

    torch.manual_seed(0)
    config = MvPEPosConfig(
        vocab_size=len(toy_tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
        pos_dim=4,
        decoder_tagger_window=3,
        decoder_tagger_hidden_size=8,
        nltk_data=str(shared_dir / "data" / "nltk_data"),
    )
    model = MvPEPosForConditionalGeneration(config).eval()
    manifest = export_model(model, toy_tokenizer, tmp_path / "onnx")
    assert (
        manifest["front_end"]["source_tagger"]["pos_tagger"] == "nltk-en" and manifest["layout"]["tagger_window"] == 3
    )
    texts = ["the cat sees the dog", "a dog chases the small cat"]
    expected = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)(texts, num_beams=2, batch_size=2)
    actual = OnnxTranslator(tmp_path / "onnx", threads=1).translate(texts, num_beams=2)
    assert actual == [r["translation_text"].strip() for r in expected]


def test_bad_input_is_refused_by_name(toy_tokenizer, tmp_path, capsys):
    from xlpe.cli.export import main
    from xlpe.models.configuration_reorderer import XLPEReordererConfig
    from xlpe.models.modeling_reorderer import XLPEReordererModel

    reorderer = XLPEReordererModel(
        XLPEReordererConfig(
            vocab_size=VOCAB, d_model=16, ffn_dim=32, pair_dim=8, attention_heads=2, pad_token_id=PAD, eos_token_id=EOS
        )
    )
    with pytest.raises(ValueError, match="model_type 'xlpe_reorderer' is a standalone reorderer"):
        check_exportable(reorderer)
    model, _ = build("dpe")
    model.generation_config.no_repeat_ngram_size = 2
    with pytest.raises(ValueError, match="no_repeat_ngram_size=2"):
        export_model(model, toy_tokenizer, tmp_path / "x")
    with pytest.raises(ValueError, match="do_sample=True"):
        SearchSettings.from_generation_config({"decoder_start_token_id": 0, "eos_token_id": 1}, do_sample=True)
    with pytest.raises(ValueError, match="bad_words_ids"):
        SearchSettings.from_generation_config({"decoder_start_token_id": 0, "bad_words_ids": [[3, 4]]})

    first = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "first")
    export = tmp_path / "onnx"
    export_directory(first, export)
    with pytest.raises(ValueError, match="exists"):
        export_directory(first, export)
    other = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "other")
    from xlpe import XLPEMarianMTModel

    changed = XLPEMarianMTModel.from_pretrained(other)
    with torch.no_grad():
        changed.lm_head.weight.mul_(2)  # tied: the embeddings too
    changed.save_pretrained(other)
    with pytest.raises(ValueError, match="weights_digest"):
        verify_export(export, other)
    graph = export / "decoder_model.onnx"
    graph.write_bytes(graph.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="decoder_model.onnx: SHA-256"):
        OnnxTranslator(export)
    with pytest.raises(ValueError, match="export_manifest.json"):
        OnnxTranslator(first)  # a model directory, not an export

    capsys.readouterr()
    for argv, message in (
        (["--model", str(tmp_path / "missing"), "--output", str(tmp_path / "o")], "no such"),
        (["--model", str(first), "--output", str(export)], "exists"),
        (["--verify", str(export)], "SHA-256"),
        (["--output", str(tmp_path / "o")], "needs --model"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("xlpe-export: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()  # refused before any work


def test_int8_schemes(toy_tokenizer, tmp_path, capsys):
    """`int8_scheme` (xlpe-export --int8_scheme): per-channel weight scales, the embedding table left fp32 by the
    *-nogather schemes, the output projection int8 only with channel-all, the scheme recorded in the manifest; the
    int8 copies translate; bad names are refused."""
    import onnx
    from onnx import numpy_helper

    from xlpe.cli.export import INT8_SCHEME_NAMES, main
    from xlpe.export.exporter import DEFAULT_INT8_SCHEME, INT8_SCHEMES

    assert tuple(INT8_SCHEMES) == INT8_SCHEME_NAMES and DEFAULT_INT8_SCHEME in INT8_SCHEMES
    model_dir = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    texts = ["the cat sees the dog", "a dog chases the small cat"]

    def weight_scales(graph):  # the int8 weights' scales: one per matrix (per tensor) or one per output column
        names = {n.input[1] for n in graph.node if n.op_type == "MatMulInteger"}
        scales = [numpy_helper.to_array(i) for i in graph.initializer if i.name.endswith("_scale") and i.data_type == 1]
        return names, scales

    cli = ["--model", str(model_dir), "--quantize", "int8"]
    exports = {
        "tensor": lambda out: export_directory(model_dir, out, quantize="int8", int8_scheme="tensor"),
        "channel-nogather": lambda out: main([*cli, "--output", str(out), "--int8_scheme", "channel-nogather"]),
        "channel": lambda out: main([*cli, "--output", str(out), "--int8_scheme", "channel"]),
        DEFAULT_INT8_SCHEME: lambda out: main([*cli, "--output", str(out)]),  # channel-all
    }
    assert DEFAULT_INT8_SCHEME == "channel-all" and len(exports) == 4
    for scheme, export_to in exports.items():
        export = tmp_path / scheme
        result = export_to(export)  # the manifest (export_directory) or the exit status (the CLI)
        assert result == 0 or isinstance(result, dict), result
        manifest = verify_export(export, model_dir)
        assert {entry["scheme"] for entry in manifest["int8_graphs"].values()} == {scheme}
        graph = onnx.load(str(export / "decoder_model_int8.onnx")).graph
        names, scales = weight_scales(graph)
        assert names, scheme
        assert any(s.size > 1 for s in scales) == INT8_SCHEMES[scheme]["per_channel"], scheme
        gathers_int8 = [n for n in graph.node if n.op_type == "DequantizeLinear"]  # a quantized embedding table
        assert bool(gathers_int8) == (INT8_SCHEMES[scheme]["op_types"] is None), scheme
        quantized_head = any(
            "/lm_head/" in n.name for n in graph.node if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")
        )  # the output projection: int8 only when the scheme says so (channel-all)
        assert quantized_head == INT8_SCHEMES[scheme]["output_projection"], scheme
        assert manifest["int8_graphs"]["decoder_model_int8.onnx"]["kept_fp32"] == (
            []
            if quantized_head
            else [n.name for n in onnx.load(str(export / "decoder_model.onnx")).graph.node if "/lm_head/" in n.name]
        ), scheme
        assert len(OnnxTranslator(export, precision="int8", threads=1, spin_wait=False).translate(texts)) == 2

    with pytest.raises(ValueError, match="int8_scheme must be one of"):
        export_directory(model_dir, tmp_path / "bad", quantize="int8", int8_scheme="int4")
    capsys.readouterr()
    for argv, message in (
        (["--int8_scheme", "int4", "--quantize", "int8"], "--int8_scheme must be one of"),
        (["--int8_scheme", "channel"], "--int8_scheme needs --quantize int8"),
    ):
        assert main(["--model", str(model_dir), "--output", str(tmp_path / "bad"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("xlpe-export: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "bad").exists()


def test_length_rule_batch_invariance_and_reports(toy_tokenizer, tmp_path, capsys, caplog):
    """The ONNX runtime applies the length rule as PyTorch does (token for token, per-sentence budgets), a
    sentence's translation does not depend on its batch, and too-long inputs and outputs at their limit are
    reported by `translate` and per file by `xlpe-export --translate`."""
    import logging

    from xlpe import XLPETranslationPipeline
    from xlpe.cli.export import main
    from xlpe.evaluation.model_loading import load_model_and_tokenizer
    from xlpe.models.length_rule import length_rule_generate_kwargs

    model_dir = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model", model_max_length=16)
    assert main(["--model", str(model_dir), "--output", str(tmp_path / "onnx")]) == 0
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    translator = OnnxTranslator(tmp_path / "onnx", threads=1)
    assert translator.tokenizer.model_max_length == 64
    texts = ["the cat sees the dog", "die katze", "a dog chases the small cat in the garden", "children play"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    limit, eos = model.config.max_position_embeddings, model.config.eos_token_id
    for num_beams in (1, 3):
        kwargs, budgets = length_rule_generate_kwargs(batch["attention_mask"], limit, eos, {"num_beams": num_beams})
        with torch.no_grad():
            expected = model.generate(**batch, **kwargs).numpy()
        actual = translator.generate(
            batch["input_ids"].numpy(), batch["attention_mask"].numpy(), budgets=budgets.numpy(), num_beams=num_beams
        )
        assert actual.tolist() == expected.tolist()
        alone = [translator.translate([text], num_beams=num_beams)[0] for text in texts]
        assert translator.translate(texts, num_beams=num_beams) == alone
        assert translator.translate(texts[::-1], num_beams=num_beams) == alone[::-1]
        pipeline = XLPETranslationPipeline(model=model, tokenizer=tokenizer)
        assert [r["translation_text"].strip() for r in pipeline(texts, num_beams=num_beams, batch_size=2)] == alone
    too_long = " ".join(["the small cat sees the dog"] * 12)
    with caplog.at_level(logging.WARNING, logger="xlpe.export.runtime"):
        translator.translate([too_long, "die katze"])
    assert "1 of 2 sentences are longer than the model's limit (64 tokens" in caplog.text
    assert "2 of 2 translations reached their length limit" in caplog.text
    source = tmp_path / "source.txt"
    source.write_text("\n".join(["die katze", too_long, "", too_long]) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["--translate", str(tmp_path / "onnx"), "--input", str(source), "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "xlpe-export: warning: 2 of 3 lines are longer than the model's limit (64 tokens" in err
    assert "line 2, 4\n" in err
    assert "xlpe-export: warning: 3 of 3 translations reached their length limit" in err


# ------------------------------------------------------------------ the export checked as a whole (issue: verify)


def tiny_reorderer(vocab_size: int, pad: int, eos: int, seed: int, max_source_positions: int = 64, max_words: int = 60):
    from xlpe.models.configuration_reorderer import XLPEReordererConfig
    from xlpe.models.modeling_reorderer import XLPEReordererModel

    torch.manual_seed(seed)
    reorderer = XLPEReordererModel(
        XLPEReordererConfig(
            vocab_size=vocab_size,
            d_model=16,
            ffn_dim=32,
            pair_dim=8,
            attention_heads=2,
            token_layers=1,
            word_layers=1,
            pad_token_id=pad,
            eos_token_id=eos,
            max_source_positions=max_source_positions,
            max_words=max_words,
        )
    )
    with torch.no_grad():
        reorderer.query.weight.normal_(0, 3.0), reorderer.key.weight.normal_(0, 3.0)
    return reorderer.eval()


@pytest.fixture(scope="module")
def reordered_export(toy_tokenizer, tmp_path_factory):
    """(model dir, export dir): a tiny XL PE model with an attached reorderer, its tokenizer recorded (version 2)
    as xlpe-train records it, exported with int8 copies."""
    from xlpe import XLPEMarianMTModel
    from xlpe.evaluation.model_loading import record_tokenizer_fingerprint

    root = tmp_path_factory.mktemp("whole")
    model_dir = save_tiny_xlpe_model(toy_tokenizer, root / "model")
    model = XLPEMarianMTModel.from_pretrained(model_dir)
    pad, eos = toy_tokenizer.pad_token_id, toy_tokenizer.eos_token_id
    model.attach_reorderer(tiny_reorderer(len(toy_tokenizer), pad, eos, seed=3))
    model.generation_config.num_beams = 2
    record_tokenizer_fingerprint(model.config, toy_tokenizer)
    model.save_pretrained(model_dir)
    export_directory(model_dir, root / "onnx", quantize="int8")
    return model_dir, root / "onnx"


def copy_of(directory, tmp_path, name: str):
    import shutil

    target = tmp_path / name
    shutil.copytree(directory, target)
    return target


def verify_cli(export, model=None) -> tuple[int, str]:
    """`xlpe-export --verify EXPORT [--model MODEL]`: (exit status, stderr's error line or stdout)."""
    import contextlib
    import io

    from xlpe.cli.export import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["--verify", str(export), *(["--model", str(model)] if model else [])])
    lines = [line for line in err.getvalue().splitlines() if line.startswith("xlpe-export: error: ")]
    assert status == 0 or len(lines) == 1, err.getvalue()
    return status, lines[0] if lines else out.getvalue()


def reseal(export, edit) -> None:
    """Edit the manifest with `edit(manifest)` and seal it again (a consistent forgery of the record)."""
    from xlpe.export.manifest import SEAL_FIELD, write_manifest

    manifest = json.loads((export / MANIFEST_FILE).read_text())
    manifest.pop(SEAL_FIELD)
    edit(manifest)
    write_manifest(export, manifest)


def test_an_untouched_export_verifies_against_its_model(reordered_export):
    model_dir, export = reordered_export
    status, said = verify_cli(export, model_dir)
    assert status == 0 and "are what" in said, said
    manifest = json.loads((export / MANIFEST_FILE).read_text())
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= set(
        manifest["files"]
    )
    assert {"reorderer/config.json", "reorderer/model.safetensors"} <= set(manifest["files"])
    assert manifest["model"]["tokenizer_fingerprint_version"] == 2
    translator = OnnxTranslator(export, threads=1)
    assert translator.generation_config["num_beams"] == 2 and translator.source_limit() == 64


def test_a_swapped_reorderer_is_named(reordered_export, tmp_path, toy_tokenizer):
    model_dir, export = reordered_export
    swapped = copy_of(export, tmp_path, "swapped")
    pad, eos = toy_tokenizer.pad_token_id, toy_tokenizer.eos_token_id
    other = tiny_reorderer(len(toy_tokenizer), pad, eos, seed=11)
    other.config.fixed_token_ids = json.loads((export / "reorderer" / "config.json").read_text())["fixed_token_ids"]
    other.save_pretrained(swapped / "reorderer")
    with pytest.raises(ValueError, match=r"reorderer/model\.safetensors: SHA-256"):
        OnnxTranslator(swapped)
    status, said = verify_cli(swapped, model_dir)
    assert status == 2 and "reorderer/model.safetensors: SHA-256" in said, said
    # the manifest forged to match: the runtime's checks pass, the comparison with the model names the file
    from xlpe.export.manifest import file_digest

    reseal(swapped, lambda m: m["files"].update({name: file_digest(swapped / name) for name in m["files"]}))
    OnnxTranslator(swapped, threads=1)
    status, said = verify_cli(swapped, model_dir)
    assert status == 2 and "reorderer/model.safetensors: differs from what" in said and "the bytes differ" in said
    # a file the manifest does not list (AutoTokenizer would read it)
    extra = copy_of(export, tmp_path, "extra")
    (extra / "special_tokens_map.json").write_text(json.dumps({"pad_token": "</s>"}))
    status, said = verify_cli(extra)
    assert status == 2 and "special_tokens_map.json: not in the export manifest" in said, said


@pytest.mark.parametrize(
    "field, value",
    [
        (("model", "max_position_embeddings"), 8),
        (("generation_config", "num_beams"), 5),
        (("front_end", "reorderer"), None),
        (("graphs", "encoder_model.onnx"), None),
    ],
)
def test_a_hand_edited_manifest_is_refused_naming_the_field(reordered_export, tmp_path, field, value):
    _, export = reordered_export
    edited = copy_of(export, tmp_path, "edited")
    manifest = json.loads((edited / MANIFEST_FILE).read_text())
    if value is None:
        manifest[field[0]].pop(field[1])
    else:
        manifest[field[0]][field[1]] = value
    (edited / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    name = ".".join(field)
    with pytest.raises(ValueError, match=f"field '{name}' was (edited|removed) after export"):
        OnnxTranslator(edited, verify=False)  # refused even without the file checks
    status, said = verify_cli(edited)
    assert status == 2 and f"field '{name}'" in said, said


def test_the_runtime_reads_its_facts_from_the_checked_files(reordered_export, tmp_path):
    """A manifest edited and sealed again: the position limit and beams still come from config.json and
    generation_config.json (whose digests are checked), and the copy that disagrees is named."""
    _, export = reordered_export
    for field, value in ((("model", "max_position_embeddings"), 8), (("generation_config", "num_beams"), 5)):
        forged = copy_of(export, tmp_path, f"forged-{field[1]}")
        reseal(forged, lambda m, field=field, value=value: m[field[0]].__setitem__(field[1], value))
        with pytest.raises(ValueError, match=f"field '{field[0]}(.{field[1]})?'"):
            OnnxTranslator(forged, threads=1)


@pytest.mark.parametrize("version", [1, 2, 3, 4, "5"])
def test_an_export_of_another_format_is_refused_in_one_line(version, reordered_export, tmp_path):
    """Only the current format is read: an older export (graphs only, the grown cache, the appended cache recorded
    as a format of its own, the layout's booleans) is refused naming the folder and the format found."""
    _, export = reordered_export
    old = copy_of(export, tmp_path, f"old-{version}")
    manifest = json.loads((old / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == 5
    (old / MANIFEST_FILE).write_text(json.dumps({**manifest, "format_version": version}))
    expected = f"{old}: an export of format {version!r}; this xlpe reads format 5 only: export again with xlpe-export"
    with pytest.raises(ValueError) as refused:
        OnnxTranslator(old, verify=False)
    assert str(refused.value) == expected
    status, said = verify_cli(old)
    assert status == 2 and said.strip() == f"xlpe-export: error: {expected}", said


def test_a_changed_generation_config_is_named(reordered_export, tmp_path):
    model_dir, export = reordered_export
    model = copy_of(model_dir, tmp_path, "model")
    settings = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**settings, "num_beams": 5}))
    status, said = verify_cli(export, model)
    assert status == 2 and "generation_config.json: differs" in said and "num_beams: 2 vs 5" in said, said
    changed = copy_of(export, tmp_path, "changed")
    (changed / "generation_config.json").write_text(json.dumps({**settings, "num_beams": 5}))
    with pytest.raises(ValueError, match=r"generation_config\.json: SHA-256"):
        OnnxTranslator(changed)


def test_left_padding_is_refused_as_xlpe_translate_refuses_it(reordered_export, tmp_path, toy_tokenizer, monkeypatch):
    import copy

    from xlpe.evaluation import model_loading
    from xlpe.export import runtime

    _, export = reordered_export
    left = copy_of(export, tmp_path, "left")
    settings = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**settings, "padding_side": "left"}))
    for verify in (True, False):
        with pytest.raises(model_loading.ModelLoadError, match="pads on the left"):
            OnnxTranslator(left, verify=verify)
    assert verify_cli(left)[0] == 2
    model, _ = build("dpe")
    left_tokenizer = copy.deepcopy(toy_tokenizer)
    left_tokenizer.padding_side = "left"
    with pytest.raises(ValueError, match="pads on the left"):
        export_model(model, left_tokenizer, tmp_path / "x")
    calls = []  # one check, shared: the runtime calls model_loading's own function
    monkeypatch.setattr(model_loading, "check_padding_side", lambda tok, name: calls.append(name))
    with pytest.raises(ValueError, match="tokenizer_config.json: SHA-256"):
        runtime.OnnxTranslator(left)
    assert calls == [str(left)]


TOKENIZER_EDITS = {
    "post_processor": lambda tok, cfg: ({**tok, "post_processor": None}, cfg),
    "normalizer": lambda tok, cfg: (
        {**tok, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}},
        cfg,
    ),
    "truncation_side": lambda tok, cfg: (tok, {**cfg, "truncation_side": "left"}),
    "padding_side": lambda tok, cfg: (tok, {**cfg, "padding_side": "left"}),
}


def edit_tokenizer(directory, edit) -> None:
    tok = json.loads((directory / "tokenizer.json").read_text())
    cfg = json.loads((directory / "tokenizer_config.json").read_text())
    tok, cfg = edit(tok, cfg)
    (directory / "tokenizer.json").write_text(json.dumps(tok))
    (directory / "tokenizer_config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("part", sorted(TOKENIZER_EDITS))
def test_tokenizer_edits_are_named_by_xlpe_translate_and_the_export_verify(reordered_export, tmp_path, part, capsys):
    from xlpe.cli.translate import main as translate

    model_dir, export = reordered_export
    model = copy_of(model_dir, tmp_path, "model")
    edit_tokenizer(model, TOKENIZER_EDITS[part])
    source = tmp_path / "in.txt"
    source.write_text("the cat sees the dog\n", encoding="utf-8")
    capsys.readouterr()
    argv = ["--model", str(model), "--input", str(source), "--output", str(tmp_path / "out.txt"), "--quiet"]
    assert translate([*argv, "--max_new_tokens", "4", "--device", "cpu"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("xlpe-translate: error: ")]
    expected = "pads on the left" if part == "padding_side" else part
    assert len(errors) == 1 and expected in errors[0], errors
    status, said = verify_cli(export, model)  # the model's own record refuses it before any comparison
    assert status == 2 and expected in said, said
    # the export's tokenizer edited: the file's digest names it, and with the record forged the fingerprint does
    edited = copy_of(export, tmp_path, "edited")
    edit_tokenizer(edited, TOKENIZER_EDITS[part])
    status, said = verify_cli(edited)
    assert status == 2 and ("pads on the left" in said if part == "padding_side" else "tokenizer" in said), said
    if part != "padding_side":
        from xlpe.export.manifest import file_digest

        reseal(edited, lambda m: m["files"].update({n: file_digest(edited / n) for n in m["files"]}))
        status, said = verify_cli(edited)
        assert status == 2 and f"{part} " in said and "not the exported model's tokenizer" in said, said


def test_an_unchanged_tokenizer_resaved_is_not_flagged_and_old_records_are_checked_the_old_way(
    reordered_export, tmp_path, toy_tokenizer
):
    from transformers import AutoConfig, AutoTokenizer

    from xlpe.evaluation.model_loading import (
        FINGERPRINT_FIELD,
        PARTS_FIELD,
        VERSION_FIELD,
        check_model_tokenizer,
        tokenizer_fingerprint,
    )
    from xlpe.features.predicted_reordering import tokenizer_fingerprint as vocabulary_fingerprint

    model_dir, export = reordered_export
    model = copy_of(model_dir, tmp_path, "model")
    tok = json.loads((model / "tokenizer.json").read_text())
    (model / "tokenizer.json").write_text(json.dumps(dict(reversed(list(tok.items()))), indent=4))
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps(dict(reversed(list(cfg.items())))))
    config = AutoConfig.from_pretrained(model)
    resaved = AutoTokenizer.from_pretrained(model)
    resaved("a b c", padding="max_length", max_length=9, truncation=True)  # settings a call leaves behind
    assert tokenizer_fingerprint(resaved) == tokenizer_fingerprint(toy_tokenizer) == config.tokenizer_fingerprint
    check_model_tokenizer(config, resaved, "m")
    # a model saved before version 2: its record is the vocabulary's, checked as then (no false alarm)
    old = config.to_dict()
    old.pop(VERSION_FIELD), old.pop(PARTS_FIELD)
    old[FINGERPRINT_FIELD] = vocabulary_fingerprint(toy_tokenizer)
    check_model_tokenizer(old, resaved, "m")
    edit_tokenizer(model, TOKENIZER_EDITS["post_processor"])
    check_model_tokenizer(old, AutoTokenizer.from_pretrained(model), "m")  # version 1 never saw post-processors
    with pytest.raises(ValueError, match="post_processor differs"):
        check_model_tokenizer(config, AutoTokenizer.from_pretrained(model), "m")
    with pytest.raises(ValueError, match="version 3"):
        check_model_tokenizer({**config.to_dict(), VERSION_FIELD: 3}, resaved, "m")


def test_mode_flags_that_do_not_apply_are_usage_errors(capsys):
    from xlpe.cli.export import MODE_FLAGS, MODES, build_parser, main

    values = {
        "--model": "m",
        "--format": "ctranslate2",
        "--quantize": "int8",
        "--int8_scheme": "channel",
        "--opset": "17",
        "--overwrite_output": None,
        "--input": "in.txt",
        "--precision": "int8",
        "--num_beams": "2",
        "--batch_size": "2",
        "--threads": "1",
        "--streams": "2",
    }
    options = {a.option_strings[0] for a in build_parser()._actions if a.option_strings and a.dest != "help"}
    assert options == {f"--{mode}" for mode in MODES} | set(values)  # every option has a mode in the table
    assert set(values) == {flag for flags in MODE_FLAGS.values() for flag in flags}
    pairs = 0
    for mode, label in MODES.items():
        for flag, value in values.items():
            if flag in MODE_FLAGS[mode]:
                continue
            capsys.readouterr()
            argv = [f"--{mode}", "somewhere", flag, *([value] if value else [])]
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert (
                err
                == f"xlpe-export: error: {flag} does not apply to {label}: it is a flag of "
                + " or ".join(MODES[m] for m in MODES if flag in MODE_FLAGS[m])
                + "\n"
            ), err
            pairs += 1
    assert pairs == 5 + 11 + 7


def test_without_ctranslate2_one_line_names_the_extra(monkeypatch, capsys, tmp_path):
    from xlpe.cli.export import main

    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "marian"}')
    assert main(["--model", str(tmp_path / "m"), "--output", str(tmp_path / "o"), "--format", "ctranslate2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xlpe-export: error: ") and 'pip install "xlpe[ctranslate2]"' in err and err.count("\n") == 1


@pytest.mark.parametrize("package", ["onnx", "onnxruntime"])
def test_without_onnx_one_line_names_the_extra(package, monkeypatch, capsys, tmp_path):
    from xlpe.cli.export import main

    monkeypatch.setitem(sys.modules, package, None)
    (tmp_path / "m").mkdir()
    for argv in (["--model", str(tmp_path / "m"), "--output", str(tmp_path / "o")], ["--verify", str(tmp_path / "m")]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("xlpe-export: error: ") and 'pip install "xlpe[onnx]"' in err and err.count("\n") == 1


def test_ctranslate2_export_of_a_stock_model_with_pad_first_gives_pytorch_tokens(toy_tokenizer, tmp_path, capsys):
    """A stock MarianMTModel as `xlpe-train --model_type vanilla` makes it (`<pad>` id 0, not OPUS-MT's last id):
    `--format ctranslate2` converts it with `<pad>` moved last (the converter's layout), and CTranslate2 gives
    PyTorch `generate`'s tokens, greedy and beam, raw text through `--verify` too."""
    pytest.importorskip("ctranslate2")
    from conftest import TOY_SENTENCES
    from transformers import MarianConfig, MarianMTModel

    from xlpe.cli.export import main
    from xlpe.export.ctranslate2_export import CTranslate2Translator

    tokenizer = toy_tokenizer
    assert tokenizer.pad_token_id == 0 != len(tokenizer) - 1
    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
        init_std=0.3,
    )
    model = MarianMTModel(config).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert main(["--model", str(tmp_path / "model"), "--output", str(tmp_path / "ct2"), "--format", "ctranslate2"]) == 0
    assert main(["--verify", str(tmp_path / "ct2"), "--model", str(tmp_path / "model")]) == 0
    assert "(1-beam 100 %, 4-beam 100 % identical)" in capsys.readouterr().out
    engine = CTranslate2Translator(tmp_path / "ct2").translator
    sources = TOY_SENTENCES[:12]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    special = set(tokenizer.all_special_ids)
    compared = 0
    for beams in (1, 4):
        with torch.no_grad():
            generated = model.generate(**batch, num_beams=beams, max_new_tokens=12)
        results = engine.translate_batch(
            [tokenizer.convert_ids_to_tokens(row) for row in tokenizer(sources)["input_ids"]],
            beam_size=beams,
            max_decoding_length=11,  # the new tokens before </s>: max_new_tokens counts it
            return_end_token=False,
        )
        for row, result in zip(generated.tolist(), results):
            expected = tokenizer.convert_ids_to_tokens([i for i in row[1:] if i not in special])
            assert result.hypotheses[0] == expected
            compared += len(expected)
    assert compared > 12 * 2 * 3  # real sequences, not empty ones
