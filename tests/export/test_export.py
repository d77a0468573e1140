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

from xlpe.export.exporter import check_exportable, export_directory, export_model
from xlpe.export.manifest import MANIFEST_FILE, verify_export
from xlpe.export.runtime import OnnxTranslator
from xlpe.export.search import SearchSettings


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


# every option at least once (CI time); XLPE_EXPORT_ALL_STACKS=1 runs all of them (measured: all pass)
COVERING = (
    "xlpe-inxl",
    "xlpe-combination+relative",
    "xlpe-combination+directional",
    "xlpe-combination+source-tags",
    "marian-relative-only-no-absolute",
    "dpe+relative+directional",
    "dpe+source-tags",
    "mvpe_pos-both-sides",
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
    assert layout["source_tags"] == ("source-tags" in name or name in ("mvpe_pos-both-sides", "mvpe_pos-encoder-tags"))
    assert layout["tagger_window"] == {"mvpe_pos-both-sides": 3, "mvpe_pos-decoder-tags-learned": 2}.get(name, 0)
    assert layout["predicted_positions"] == name.startswith("xlpe-")  # XL PE's predictor runs inside the graph


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

    from xlpe.models.configuration_reorderer import XLPEReordererConfig
    from xlpe.models.modeling_reorderer import XLPEReordererModel

    model, source = build("xlpe-combination")
    torch.manual_seed(3)
    reorderer = XLPEReordererModel(
        XLPEReordererConfig(
            vocab_size=VOCAB,
            d_model=16,
            ffn_dim=32,
            pair_dim=8,
            attention_heads=2,
            token_layers=1,
            word_layers=1,
            pad_token_id=PAD,
            eos_token_id=EOS,
            max_source_positions=24,
            max_words=20,
        )
    )
    with torch.no_grad():
        reorderer.query.weight.normal_(0, 3.0), reorderer.key.weight.normal_(0, 3.0)
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
    *-nogather schemes, the scheme recorded in the manifest; the int8 copies translate; bad names are refused."""
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
        DEFAULT_INT8_SCHEME: lambda out: main([*cli, "--output", str(out)]),
    }
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
        assert not any(
            "/lm_head/" in n.name for n in graph.node if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")
        )
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
