"""The export directory's record of where it came from (`export_manifest.json`) and its checks.

An export is a copy of a model in another form; served for months, it must be possible to tell which model it is
and whether its files are still the ones written. The manifest records

* the model: its `model_type`, a digest of its configuration (`config_digest`: the config as JSON, without the
  fields that name a path or a library version) and of its weights (`weights_digest`: every tensor of the state
  dict by name, dtype, shape and bytes), and the fingerprint of its tokenizer (the one `xlpe-train` records);
* the tools: xlpe, torch, transformers, onnx and onnxruntime versions, the ONNX opset;
* each graph file with its SHA-256, inputs and outputs (and the int8 copies when made);
* the graph layout (extra inputs, cache shape), the generation config, and what the Python front end runs.

`verify_export(directory, model=None)` checks the files against the manifest (a graph changed or missing, a
tokenizer that is not the recorded one) and, given the model it came from (a directory or a loaded model), that
its configuration and weights are the recorded ones: a ValueError naming the file or field and both values.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST_FILE = "export_manifest.json"
FORMAT = "xlpe-onnx-export"
FORMAT_VERSION = 1
VOLATILE_CONFIG_FIELDS = (
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_commit_hash",
    "_attn_implementation_autoset",
    "check_inputs",
)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def config_digest(config) -> str:
    """SHA-256 of the configuration (a config or its dict) without path and version fields."""
    data = config if isinstance(config, dict) else config.to_dict()
    data = {k: v for k, v in data.items() if k not in VOLATILE_CONFIG_FIELDS}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def weights_digest(model) -> str:
    """SHA-256 over the state dict: each tensor's name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tool_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("xlpe", "torch", "transformers", "onnx", "onnxruntime"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def write_manifest(directory: Path, manifest: dict) -> Path:
    path = Path(directory) / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_manifest(directory) -> dict:
    """The manifest of an export directory; ValueError when it is missing or not one."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise ValueError(f"{directory}: no {MANIFEST_FILE}: not a directory written by xlpe-export")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format {manifest.get('format')!r} version {manifest.get('format_version')!r}, "
            f"expected {FORMAT!r} version {FORMAT_VERSION}"
        )
    return manifest


def verify_files(directory, manifest: dict, tokenizer=None) -> None:
    """ValueError when a graph file is missing or changed, or the tokenizer is not the recorded one."""
    directory = Path(directory)
    for group in ("graphs", "int8_graphs"):
        for name, entry in (manifest.get(group) or {}).items():
            path = directory / name
            if not path.is_file():
                raise ValueError(f"{path}: missing (the export manifest lists it)")
            actual = file_digest(path)
            if actual != entry["sha256"]:
                raise ValueError(
                    f"{path}: SHA-256 {actual[:16]}..., the export manifest records "
                    f"{entry['sha256'][:16]}...: the file was changed after export"
                )
    if tokenizer is not None:
        from ..features.predicted_reordering import tokenizer_fingerprint

        actual = tokenizer_fingerprint(tokenizer)
        if actual != manifest["model"]["tokenizer_fingerprint"]:
            raise ValueError(
                f"{directory}: the tokenizer has fingerprint {actual}, the export manifest records "
                f"{manifest['model']['tokenizer_fingerprint']}: it is not the exported model's tokenizer"
            )


def verify_against_model(manifest: dict, model, where: str) -> None:
    """ValueError unless `model` (loaded) has the recorded configuration and weights."""
    recorded = manifest["model"]
    for field, actual in (
        ("model_type", model.config.model_type),
        ("config_digest", config_digest(model.config)),
        ("weights_digest", weights_digest(model)),
    ):
        if actual != recorded[field]:
            raise ValueError(
                f"{where}: {field} is {actual[:16] if 'digest' in field else actual!r} but the export "
                f"manifest records {recorded[field][:16] if 'digest' in field else recorded[field]!r}: the "
                "export was not made from this model (or the model changed since)"
            )


def verify_export(directory, model=None) -> dict:
    """Check an export directory (module docstring); `model`: a model directory or a loaded model to compare with.
    Returns the manifest."""
    from transformers import AutoTokenizer

    manifest = read_manifest(directory)
    verify_files(directory, manifest, AutoTokenizer.from_pretrained(str(directory)))
    if model is not None:
        where = str(model) if isinstance(model, (str, Path)) else "the model"
        if isinstance(model, (str, Path)):
            from ..evaluation.model_loading import load_model

            model = load_model(str(model))
        verify_against_model(manifest, model, where)
    return manifest


__all__ = [
    "MANIFEST_FILE",
    "config_digest",
    "file_digest",
    "read_manifest",
    "tool_versions",
    "verify_against_model",
    "verify_export",
    "verify_files",
    "weights_digest",
    "write_manifest",
]
