"""Several batches decoded at once (xlpe/export/streams.py, `xlpe-export --translate --streams`): every batch is
translated exactly as alone, in order, with a fast tokenizer shared by the streams; bad values are refused by name.
(CTranslate2's streams, its inter_threads: tests/test_opus_mt_layout.py.)"""

from __future__ import annotations

import os

import pytest
from conftest import save_tiny_xlpe_model

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from xlpe.export.exporter import export_directory
from xlpe.export.runtime import OnnxTranslator
from xlpe.export.streams import auto_streams, check_streams, threads_per_stream, translate_batches

TEXTS = [
    "the cat sees the dog",
    "die katze",
    "a dog chases the small cat in the garden",
    "children play",
    "",
    "the small cat sees the dog and the dog sees the cat " * 6,  # beyond the limit: cut and reported
    "der hund",
    "the dog",
]


@pytest.fixture(scope="module")
def export(toy_tokenizer, tmp_path_factory):
    """A tiny XL PE model (built-in predictor, the toy *fast* tokenizer) exported with int8 copies."""
    root = tmp_path_factory.mktemp("streams")
    model_dir = save_tiny_xlpe_model(toy_tokenizer, root / "model", model_max_length=16)
    export_directory(model_dir, root / "onnx", quantize="int8")
    return root / "onnx"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_streams_translate_each_batch_as_alone_and_in_order(export, precision):
    alone = OnnxTranslator(export, precision=precision, threads=1)
    streamed = OnnxTranslator(export, precision=precision, threads=3, streams=3)
    batches = [TEXTS[i : i + size] for size in (1, 2, 3) for i in range(0, len(TEXTS), size)] * 2  # 28 batches
    for num_beams in (1, 3):
        expected = [alone.translate_with_report(batch, num_beams=num_beams) for batch in batches]
        assert translate_batches(streamed, batches, num_beams=num_beams) == expected
        assert translate_batches(alone, batches, num_beams=num_beams) == expected  # one stream: the plain loop
    assert any(report[1] for report in expected)  # the cut source is reported by its batch, under streams too
    assert translate_batches(streamed, []) == []


def test_an_error_in_one_batch_stops_the_others_from_starting():
    import threading
    import time

    class Failing:
        streams, started, lock = 2, [], threading.Lock()

        def translate_with_report(self, batch):
            with self.lock:
                self.started.append(batch[0])
            time.sleep(0.02)
            if batch[0] == "2":
                raise ValueError("texts: batch 2 is bad")
            return batch, [], []

    translator = Failing()
    with pytest.raises(ValueError, match="batch 2 is bad"):
        translate_batches(translator, [[str(i)] for i in range(50)])
    assert "2" in translator.started and len(translator.started) <= 6  # not the 47 batches after it


def test_stream_counts_are_checked_and_threads_shared_out(export):
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"streams must be a positive integer .* got"):
            check_streams(bad)
    with pytest.raises(ValueError, match="streams must be a positive integer"):
        OnnxTranslator(export, streams=0)
    assert threads_per_stream(None, 1) is None  # one stream: the engine's default (every core)
    assert threads_per_stream(4, 2) == 2 and threads_per_stream(3, 2) == 1 and threads_per_stream(1, 4) == 1
    assert threads_per_stream(None, 2) == max(1, (os.cpu_count() or 1) // 2)
    assert auto_streams(2, 10) == 2 and auto_streams(8, 3) == 3 and auto_streams(4, 0) == 1
    assert auto_streams(None, 100) == (os.cpu_count() or 1)


def test_cli_streams_give_the_same_file_and_bad_values_exit_2(export, tmp_path, capsys):
    from xlpe.cli.export import main

    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS * 3) + "\n", encoding="utf-8")
    outputs = {}
    for streams in ("1", "3"):
        argv = ["--translate", str(export), "--input", str(source), "--batch_size", "2", "--threads", "3"]
        capsys.readouterr()
        assert main([*argv, "--streams", streams, "--precision", "int8"]) == 0
        captured = capsys.readouterr()
        outputs[streams] = (captured.out, captured.err)
    assert outputs["1"] == outputs["3"] and len(outputs["1"][0].splitlines()) == len(TEXTS) * 3
    assert "3 of 21 lines are longer than the model's limit" in outputs["3"][1]
    assert main(["--translate", str(export), "--input", str(source), "--streams", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["xlpe-export: error: --streams must be >= 1, got 0"]
    assert main(["--model", str(export), "--output", str(tmp_path / "x"), "--streams", "2"]) == 2
    assert "--streams does not apply to export (--output)" in capsys.readouterr().err
