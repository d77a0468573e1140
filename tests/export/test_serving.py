"""Serving without PyTorch (docs/deployment.md): `xlpe-export --translate` of an export, in a process where importing
torch, transformers or onnx fails, gives the lines the normal process gives and imports none of them; an export whose
front end needs PyTorch (an attached reorderer) is refused in one line. The export's tokenizer read with `tokenizers`
alone (`TokenizerFile`) gives transformers' ids, padding, truncation, decoded text and fingerprint; the generation
config reads as `GenerationConfig` reads it; the runtime's two one-node graphs, kept as bytes, are what `onnx.helper`
builds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, save_tiny_xlpe_model

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from test_export import tiny_reorderer  # noqa: E402

from xlpe.export.exporter import export_directory  # noqa: E402

# run in the child before anything else: every import of torch, transformers or onnx (or their submodules) fails
BLOCKER = """
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers", "onnx"):
            raise ImportError(f"{name} is blocked (serving without PyTorch)")
sys.meta_path.insert(0, Blocked())
from xlpe.cli.export import main
status = main(sys.argv[1:])
loaded = sorted({name.partition(".")[0] for name in sys.modules} & {"torch", "transformers", "onnx"})
print("LOADED", ",".join(loaded), file=sys.stderr)
sys.exit(status)
"""
TEXTS = ["the cat sees the dog", "", "a dog chases the small cat", "die katze </s> <unk> sees", "the the the dog"]


def blocked_translate(export, source, *flags):
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, "--translate", str(export), "--input", str(source), "--threads", "1", *flags],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "TOKENIZERS_PARALLELISM": "false"},
        timeout=300,
    )


@pytest.fixture(scope="module")
def exports(toy_tokenizer, tmp_path_factory):
    """{name: export dir}: XL PE with its built-in predictor (indirect cache, int8 copies), and the same model with an
    attached standalone reorderer."""
    from xlpe import XLPEMarianMTModel

    root = tmp_path_factory.mktemp("serving")
    model_dir = save_tiny_xlpe_model(toy_tokenizer, root / "model")
    export_directory(model_dir, root / "builtin", quantize="int8")
    model = XLPEMarianMTModel.from_pretrained(model_dir)
    model.attach_reorderer(
        tiny_reorderer(len(toy_tokenizer), toy_tokenizer.pad_token_id, toy_tokenizer.eos_token_id, 3)
    )
    model.save_pretrained(root / "reordered-model")
    toy_tokenizer.save_pretrained(root / "reordered-model")
    export_directory(root / "reordered-model", root / "reordered")
    return {"builtin": root / "builtin", "reordered": root / "reordered"}


def test_translate_without_torch_or_transformers_gives_the_normal_lines(exports, tmp_path, capsys):
    from xlpe.cli.export import main

    source = tmp_path / "in.txt"
    source.write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    for flags in (["--num_beams", "3"], ["--precision", "int8", "--batch_size", "2"]):
        capsys.readouterr()
        assert main(["--translate", str(exports["builtin"]), "--input", str(source), "--threads", "1", *flags]) == 0
        expected = capsys.readouterr().out
        assert len(expected.splitlines()) == len(TEXTS) and any(expected.splitlines())
        result = blocked_translate(exports["builtin"], source, *flags)
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected
        assert "LOADED \n" in result.stderr, result.stderr  # none of them was imported


def test_an_attached_reorderer_without_torch_is_one_line(exports, tmp_path):
    from xlpe.export.runtime import NEEDS_TORCH

    source = tmp_path / "in.txt"
    source.write_text("the cat sees the dog\n", encoding="utf-8")
    result = blocked_translate(exports["reordered"], source)
    errors = [line for line in result.stderr.splitlines() if not line.startswith("LOADED")]
    assert result.returncode == 2 and result.stdout == ""
    assert errors == [
        f"xlpe-export: error: {exports['reordered']}: {NEEDS_TORCH}, which is not installed: pip install xlpe"
    ]


def test_the_tokenizer_file_reads_as_transformers_does(exports):
    from transformers import AutoTokenizer

    from xlpe.evaluation.model_loading import tokenizer_fingerprint_parts
    from xlpe.export.tokenizer_file import TokenizerFile

    directory = exports["builtin"]
    ours, theirs = TokenizerFile(directory), AutoTokenizer.from_pretrained(str(directory))
    texts = [text for text in TEXTS if text] + ["x " * 80]  # special tokens as text; one longer than the limit
    for kwargs in ({}, {"padding": True, "truncation": True, "max_length": 9, "return_tensors": "np"}):
        got, expected = ours(texts, **kwargs), theirs(texts, **kwargs)
        for name in ("input_ids", "attention_mask"):
            assert json.dumps(got[name].tolist() if kwargs else got[name]) == json.dumps(
                expected[name].tolist() if kwargs else expected[name]
            )
        assert [e.offsets for e in got.encodings] == [e.offsets for e in expected.encodings]
    ids = ours(texts, padding=True, return_tensors="np")["input_ids"]
    for skip in (True, False):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == theirs.batch_decode(ids, skip_special_tokens=skip)
    assert tokenizer_fingerprint_parts(ours) == tokenizer_fingerprint_parts(theirs)


def test_a_sentencepiece_tokenizer_is_said_to_need_transformers(tmp_path):
    from xlpe.export.tokenizer_file import needs_transformers

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    assert "no tokenizer.json" in needs_transformers(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert "tokenizer_class 'MarianTokenizer'" in needs_transformers(tmp_path)


def test_the_stored_graphs_are_what_onnx_builds():
    from xlpe.export.small_graphs import (
        LOG_SOFTMAX_MODEL,
        PROBE_MODEL,
        indirect_attention_available,
        log_softmax_model,
        probe_model,
    )

    assert log_softmax_model() == LOG_SOFTMAX_MODEL and probe_model() == PROBE_MODEL
    assert indirect_attention_available()  # the pinned onnxruntime has the kernel (the probe's reference agrees)


def test_the_generation_config_reads_as_transformers_reads_it(exports, tmp_path):
    from transformers import GenerationConfig

    from xlpe.export.manifest import _comparable, read_generation_config

    opus = {"bad_words_ids": [[7]], "max_length": 512, "num_beams": 4, "length_penalty": 1.0, "eos_token_id": [1]}
    (tmp_path / "generation_config.json").write_text(json.dumps({**opus, "decoder_start_token_id": 0, "top_k": None}))
    for directory in (exports["builtin"], tmp_path):
        settings = GenerationConfig.from_pretrained(str(directory)).to_dict()
        expected = {key: value for key, value in _comparable(settings).items() if value is not None}
        assert read_generation_config(directory) == expected
