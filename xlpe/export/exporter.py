"""`export_model`: a saved translation model -> an export directory (what `xlpe-export` writes).

    OUT/
      encoder_model.onnx  decoder_model.onnx  decoder_with_past_model.onnx     fp32 graphs (graphs.py)
      *_int8.onnx                                   with --quantize int8: onnxruntime's dynamic int8 quantization
                                                    (settings: --int8_scheme, INT8_SCHEMES; default per-channel)
      tokenizer files, config.json, generation_config.json
      reorderer/                                    XL PE with an attached reorderer: the reorderer (front end)
      pos_tagger.json                               a trained source tagger ("perceptron:<file>"), when the model
                                                    has one
      export_manifest.json                          where it came from, digests of every file, layout, front end
                                                    (manifest.py)

Which models: every registered family whose `ModelFamily.exportable` is set (the three of this package, in every
position option), and stock MarianMT (the baseline of the speed comparison). Refused by name, before any work:
another `model_type` (a standalone reorderer directory
is told to attach itself to an XL PE model first), a model that is not an encoder-decoder, and a generation
config with a search option the exported search does not reproduce (search.py). The directory is written beside
`OUT` and renamed into place when complete; an existing `OUT` is replaced only with `overwrite=True`.

`verify_export(OUT, model)` (`xlpe-export --verify OUT --model DIR`) checks the export as a whole: the manifest's
seal and every file against it (manifest.py), then writes what the model would export now (`write_model_files`:
tokenizer, config, generation config, reorderer, tagger; the graphs are covered by the layout and the config and
weight digests) and names the first file that differs and what differs in it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..models.registry import MODEL_FAMILIES
from .graph_names import int8_name
from .graphs import DEFAULT_OPSET, GRAPH_FILES, export_graphs, graph_layout
from .manifest import (
    FORMAT,
    FORMAT_VERSION,
    config_digest,
    export_facts,
    file_difference,
    file_digest,
    file_digests,
    first_difference,
    read_generation_config,
    read_manifest,
    tool_versions,
    verify_against_model,
    verify_files,
    weights_digest,
    write_manifest,
)
from .search import SearchSettings

STOCK_EXPORTABLE_TYPES = ("marian",)  # stock models the export takes besides the registered families


def exportable_types() -> tuple[str, ...]:
    """The model types the export takes: the registered families marked exportable, and stock MarianMT."""
    return tuple(f.model_type for f in MODEL_FAMILIES.values() if f.exportable) + STOCK_EXPORTABLE_TYPES


QUANTIZATIONS = ("int8",)
REORDERER_DIR = "reorderer"


def check_output(output: Path, overwrite: bool) -> None:
    if Path(output).exists() and not overwrite:
        raise ValueError(f"output {output}: exists (pass overwrite=True / --overwrite_output to replace it)")


def check_exportable(model) -> None:
    """ValueError naming what makes `model` impossible to export (module docstring)."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type == "xlpe_reorderer":
        raise ValueError(
            "model_type 'xlpe_reorderer' is a standalone reorderer, not a translation model: attach it to "
            "an XL PE model (xlpe-reorder attach --reorderer DIR --model MODEL) and export that model"
        )
    if model_type not in exportable_types():
        raise ValueError(
            f"model_type {model_type!r} cannot be exported: expected one of {', '.join(exportable_types())}"
        )
    if not getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"is_encoder_decoder is {getattr(config, 'is_encoder_decoder', None)!r}: only encoder-decoder "
            "translation models can be exported"
        )
    SearchSettings.from_generation_config(model.generation_config.to_dict())  # refuses unsupported search options


def _source_front_end(model, layout, model_dir: Path | None, output: Path) -> dict:
    """What the Python front end runs before the encoder graph, with its files copied into `output`."""
    config, front = model.config, {"reorderer": None, "source_tagger": None}
    if layout.reorder_positions:
        model.get_encoder().reorderer.save_pretrained(output / REORDERER_DIR)
        front["reorderer"] = REORDERER_DIR
    if layout.source_tags:
        from ..models.pos_tagging_hub import (
            PERCEPTRON_PREFIX,
            SAVED_TAGGER_FILE,
            resolve_tagger_file,
            tagger_file_name,
        )

        tagger = config.pos_tagger
        file_name = tagger_file_name(tagger)
        if file_name is not None:
            shutil.copyfile(
                resolve_tagger_file(file_name, str(model_dir) if model_dir else None), output / SAVED_TAGGER_FILE
            )
            tagger = PERCEPTRON_PREFIX + SAVED_TAGGER_FILE
        front["source_tagger"] = {
            "pos_tagger": tagger,
            "pos_tags": list(config.pos_tags),
            "nltk_data": getattr(config, "nltk_data", None),
        }
    return front


def write_model_files(model, tokenizer, layout, model_dir, target: Path) -> dict:
    """Everything of an export but the graphs and the manifest, written into `target`: the tokenizer files (skipped
    when `tokenizer` is None), `config.json`, `generation_config.json` and the front end's files; returns the
    manifest's `front_end`. The export and `verify_export` (what the model would export now) both write with it."""
    if tokenizer is not None:
        tokenizer.save_pretrained(target)
    model.config.save_pretrained(target)
    model.generation_config.save_pretrained(target)
    return _source_front_end(model, layout, Path(model_dir) if model_dir else None, target)


def fp32_nodes(path: Path, scheme: str = "channel-all") -> list[str]:
    """The nodes int8 quantization leaves in fp32 under `scheme`: the output projection onto the vocabulary
    (`lm_head`), whose logits rank the beam's candidates, unless the scheme quantizes it too (`-all`; toy Marian /
    XL PE, per tensor, one batching: BLEU -0.14 / -0.10 with it quantized, +0.06 / +0.11 without;
    docs/benchmarks/onnx.md)."""
    import onnx

    if INT8_SCHEMES[check_int8_scheme(scheme)]["output_projection"]:
        return []
    graph = onnx.load(str(path), load_external_data=False).graph
    return [node.name for node in graph.node if node.op_type in ("MatMul", "Gemm") and "/lm_head/" in node.name]


# int8 schemes (onnxruntime `quantize_dynamic` settings; the weights of MatMul/Gemm are int8, their activations are
# quantized per call, per tensor, over the whole batch x beams): "tensor": one weight scale a matrix, the embedding
# Gather quantized too; "channel": one weight scale per output column (per_channel=True); "channel-reduce": per
# channel, 7-bit weights (reduce_range=True); "*-nogather": only MatMul/Gemm quantized (the embedding table, which
# Marian ties to the output projection, stays fp32). `fp32_nodes` (the output projection) is kept in fp32 by all but
# "channel-all", which quantizes it too, per output column, as CTranslate2's int8 does (on an OPUS-MT-size model the
# fp32 output projection was 31 % of an int8 decoder step: docs/benchmarks/onnx.md).
# "channel": on 1500 held-out sentences (two batchings) its int8 BLEU change was -0.07..+0.02 for the four trained
# toy models (stock Marian, XL PE, DPE, mvPE+POS), "tensor" -0.13..+0.09; on the 300-sentence test split every
# scheme moved by up to 0.3-0.7 with the batching (2-14 sentences change). Default "channel-all": on three trained
# OPUS-MT-layout runs (Multi30k test, 1,000 sentences) +0.05..+0.21 BLEU against fp32 ("channel" +-0.00), and an
# OPUS-MT-size decoder step 11-19 % faster than "channel": docs/benchmarks/onnx.md.
_MATMULS = ["MatMul", "Gemm"]
INT8_SCHEMES = {
    "tensor": {"per_channel": False, "reduce_range": False, "op_types": None, "output_projection": False},
    "tensor-nogather": {"per_channel": False, "reduce_range": False, "op_types": _MATMULS, "output_projection": False},
    "channel": {"per_channel": True, "reduce_range": False, "op_types": None, "output_projection": False},
    "channel-reduce": {"per_channel": True, "reduce_range": True, "op_types": None, "output_projection": False},
    "channel-nogather": {"per_channel": True, "reduce_range": False, "op_types": _MATMULS, "output_projection": False},
    "channel-all": {"per_channel": True, "reduce_range": False, "op_types": None, "output_projection": True},
}
DEFAULT_INT8_SCHEME = "channel-all"


def check_int8_scheme(scheme: str) -> str:
    if scheme not in INT8_SCHEMES:
        raise ValueError(f"int8_scheme must be one of {sorted(INT8_SCHEMES)}, got {scheme!r}")
    return scheme


def quantize_graph(source: Path, target: Path, scheme: str = DEFAULT_INT8_SCHEME) -> list[str]:
    """One graph's dynamic int8 copy under `scheme` (INT8_SCHEMES); returns the node names kept in fp32."""
    import logging

    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    settings = INT8_SCHEMES[check_int8_scheme(scheme)]
    keep = fp32_nodes(Path(source), scheme)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process (shape inference) is for static-shape vision models
    try:
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            nodes_to_exclude=keep,
            per_channel=settings["per_channel"],
            reduce_range=settings["reduce_range"],
            op_types_to_quantize=settings["op_types"],
            # the indirect step graph's com.microsoft attention has no ONNX shape inference: what follows is float32
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
    finally:
        root.setLevel(level)
    return keep


def quantize_int8(directory: Path, scheme: str = DEFAULT_INT8_SCHEME) -> dict:
    """Dynamic int8 copies of the graphs (onnxruntime.quantization: int8 weights of MatMul/Gemm, activations
    quantized per call; `fp32_nodes` kept in fp32; `scheme`: one of INT8_SCHEMES); returns
    {file: {"sha256": ..., "kept_fp32": [...], "scheme": scheme}}."""
    written = {}
    for file_name in GRAPH_FILES:
        target = directory / int8_name(file_name)
        keep = quantize_graph(directory / file_name, target, scheme)
        written[target.name] = {"sha256": file_digest(target), "kept_fp32": keep, "scheme": scheme}
    return written


def export_model(
    model,
    tokenizer,
    output,
    quantize: str | None = None,
    opset: int = DEFAULT_OPSET,
    overwrite: bool = False,
    model_dir=None,
    int8_scheme: str = DEFAULT_INT8_SCHEME,
) -> dict:
    """Export a loaded `model` (eval mode) and its `tokenizer` into the directory `output`; returns the manifest.
    `model_dir`: where the model was loaded from (recorded; a trained source tagger's file is read from it);
    `int8_scheme`: the quantization settings of the int8 copies (INT8_SCHEMES)."""
    from ..evaluation.model_loading import (
        FINGERPRINT_VERSION,
        check_padding_side,
        fingerprint_of_parts,
        tokenizer_fingerprint_parts,
    )

    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {QUANTIZATIONS} or None, got {quantize!r}")
    check_int8_scheme(int8_scheme)
    check_exportable(model)
    check_padding_side(tokenizer, "the tokenizer")  # as xlpe-translate and the runtime refuse it
    output = Path(output)
    check_output(output, overwrite)
    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.eval()
    layout = graph_layout(model)
    had_checks = getattr(model.config, "check_inputs", None)
    try:
        if had_checks is not None:
            model.config.check_inputs = False  # value checks sync with the host: not part of a graph
        graphs = export_graphs(model, layout, staging, opset)
    finally:
        if had_checks is not None:
            model.config.check_inputs = had_checks
    for file_name, entry in graphs.items():
        entry["sha256"] = file_digest(staging / file_name)
    front_end = write_model_files(model, tokenizer, layout, model_dir, staging)
    int8_graphs = quantize_int8(staging, int8_scheme) if quantize else {}
    parts = tokenizer_fingerprint_parts(tokenizer)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "opset": opset,
        "tools": tool_versions(),
        "model": {
            "model_type": model.config.model_type,
            "source": str(model_dir) if model_dir else None,
            "config_digest": config_digest(model.config),
            "weights_digest": weights_digest(model),
            "tokenizer_fingerprint": fingerprint_of_parts(parts),
            "tokenizer_fingerprint_version": FINGERPRINT_VERSION,
            "tokenizer_fingerprint_parts": parts,
            "max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
        },
        "layout": layout.to_dict(),
        "graphs": graphs,
        "int8_graphs": int8_graphs,
        "files": file_digests(staging, exclude={*graphs, *int8_graphs}),
        "generation_config": read_generation_config(staging),  # a copy of what the runtime reads from the file
        "front_end": front_end,
    }
    write_manifest(staging, manifest)
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    return manifest


def export_directory(
    model_dir,
    output,
    quantize: str | None = None,
    opset: int = DEFAULT_OPSET,
    overwrite: bool = False,
    int8_scheme: str = DEFAULT_INT8_SCHEME,
) -> dict:
    """Load the model and tokenizer saved in `model_dir` (checked to belong together: evaluation.model_loading)
    and export them (`export_model`)."""
    from ..evaluation.model_loading import load_model_and_tokenizer

    check_int8_scheme(int8_scheme)
    check_output(Path(output), overwrite)  # before the (slow) load
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    return export_model(
        model, tokenizer, output, quantize, opset, overwrite, model_dir=model_dir, int8_scheme=int8_scheme
    )


def verify_export(directory, model=None, tokenizer=None) -> dict:
    """Check an export directory as a whole (module docstring); `model`: the model directory it came from (its
    tokenizer loaded and checked as `xlpe-translate` does) or a loaded model (with its `tokenizer`, when given) to
    compare with. ValueError naming the first file or field that differs; returns the manifest."""
    from transformers import AutoTokenizer

    from ..evaluation.model_loading import check_padding_side, load_model_and_tokenizer

    directory = Path(directory)
    manifest = read_manifest(directory)
    exported_tokenizer = AutoTokenizer.from_pretrained(str(directory))
    check_padding_side(exported_tokenizer, str(directory))
    verify_files(directory, manifest, exported_tokenizer)
    export_facts(directory, manifest)
    if model is None:
        return manifest
    model_dir = None
    if isinstance(model, (str, Path)):
        model_dir = Path(model)
        model, tokenizer = load_model_and_tokenizer(str(model_dir))
    where = str(model_dir) if model_dir else "the model"
    recorded = manifest["model"]
    if model.config.model_type != recorded["model_type"]:
        raise ValueError(
            f"{where}: model_type is {model.config.model_type!r} but the export manifest records "
            f"{recorded['model_type']!r}: the export was not made from this model"
        )
    layout = graph_layout(model)
    difference = first_difference(manifest["layout"], layout.to_dict())
    if difference:
        raise ValueError(f"{where}: the graph layout differs from the export's ({difference}; export first)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="xlpe-verify-") as scratch:
        scratch = Path(scratch)
        front_end = write_model_files(model, tokenizer, layout, model_dir, scratch)
        expected = file_digests(scratch)
        exported = manifest.get("files") or {}
        names = sorted(set(expected) | set(exported)) if tokenizer is not None else sorted(expected)
        for name in names:
            if name not in expected:
                raise ValueError(f"{directory / name}: in the export, but {where} would not export it now")
            if name not in exported:
                raise ValueError(f"{directory / name}: missing from the export; {where} would export it now")
            if expected[name] != exported[name]:
                what = file_difference(directory / name, scratch / name) or "the bytes differ"
                raise ValueError(
                    f"{directory / name}: differs from what {where} would export now ({what}; export first, model "
                    "second): the export was not made from this model, or the model changed since"
                )
    difference = first_difference(manifest["front_end"], front_end)
    if difference:
        raise ValueError(f"{where}: the front end differs from the export's ({difference}; export first)")
    verify_against_model(manifest, model, where)
    return manifest


__all__ = [
    "DEFAULT_INT8_SCHEME",
    "STOCK_EXPORTABLE_TYPES",
    "exportable_types",
    "INT8_SCHEMES",
    "check_exportable",
    "export_directory",
    "export_model",
    "int8_name",
    "quantize_graph",
    "quantize_int8",
    "verify_export",
    "write_model_files",
]
