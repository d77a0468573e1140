"""Deployment: ONNX export of a translation model and fast CPU inference from the export (docs/deployment.md).

* `graphs`: the three ONNX graphs (encoder with the family's extra inputs, decoder without and with past key
  values), the wrappers the TorchScript exporter traces, and the export itself;
* `onnx_fixes`: the symbolics and the graph pass that the exporter and onnxruntime need (no model code changes);
* `exporter`: a saved model -> an export directory (`xlpe-export`), with tokenizer, front-end files and int8 copies;
* `manifest`: what an export records (model config and weight digests, tools, opset, every file's digest, a seal
  over its own fields) and checks;
* `search`: greedy and beam search in numpy, reproducing transformers' `generate`;
* `step_caches`: the attention forms traced into the step graph (the cache appended outside it, the cross-attention
  cache once per sentence);
* `runtime`: `OnnxTranslator`, raw text -> translations with onnxruntime and the Python front end;
* `graph_names`, `small_graphs`, `tokenizer_file`: what the runtime needs without torch, transformers or onnx (the
  graphs' names and `GraphLayout`; its two one-node graphs as bytes; the tokenizer read with `tokenizers`);
* `ctranslate2_export`: a stock Marian through CTranslate2's own converter, and `CTranslate2Translator`;
* `streams`: `translate_batches`, several batches decoded at once (how a translation of a file uses more cores).

Layer: beside `evaluation` (it uses `models`, `features` and `evaluation.model_loading`); only `cli` imports it.
"""

from __future__ import annotations

_EXPORTS = {
    "OnnxTranslator": "runtime",
    "SearchSettings": "search",
    "export_directory": "exporter",
    "export_model": "exporter",
    "verify_export": "exporter",
    "read_manifest": "manifest",
    "translate_batches": "streams",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OnnxTranslator",
    "SearchSettings",
    "export_directory",
    "export_model",
    "read_manifest",
    "translate_batches",
    "verify_export",
]
