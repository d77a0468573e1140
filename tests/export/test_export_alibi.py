"""ALiBi decoders export through the score-bias path (the appended self-attention cache form, as relative PE's):
ONNX generation token-identical to PyTorch `generate`, greedy and beam, for plain ALiBi and XL-ALiBi."""

from __future__ import annotations

import pytest
from test_export import assert_same_generation, build, stack_tokenizer  # noqa: F401 (a fixture)

from xlpe.export.exporter import export_model
from xlpe.export.runtime import OnnxTranslator
from xlpe.export.step_caches import indirect_cache_supported

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize(
    "name", ["marian-alibi-only-no-absolute", "xlpe-xl-alibi-every-layer+alibi-no-absolute", "dpe+alibi-decoder"]
)
def test_alibi_stacks_export_and_generate_as_pytorch(name, stack_tokenizer, tmp_path):  # noqa: F811
    model, source = build(name)
    assert not indirect_cache_supported(model)  # its own score bias: not the kernel's stock attention
    export_model(model, stack_tokenizer, tmp_path / "onnx")
    assert_same_generation(model, OnnxTranslator(tmp_path / "onnx", threads=1), source)
