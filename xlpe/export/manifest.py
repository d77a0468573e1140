"""The export directory's record of where it came from (`export_manifest.json`) and its checks.

An export is a copy of a model in another form; served for months, it must be possible to tell which model it is
and whether its files are still the ones written. The manifest records

* the model: its `model_type`, a digest of its configuration (`config_digest`: the config as JSON, without the
  fields that name a path or a library version) and of its weights (`weights_digest`: every tensor of the state
  dict by name, dtype, shape and bytes), and the version-2 fingerprint of its tokenizer with its parts
  (`xlpe.evaluation.model_loading.tokenizer_fingerprint_parts`: normaliser, pre-tokeniser, model, post-processor,
  added and special tokens, padding and truncation side);
* the tools: xlpe, torch, transformers, onnx and onnxruntime versions, the ONNX opset;
* each graph file with its SHA-256, inputs and outputs (and the int8 copies when made);
* `files`: the SHA-256 of every other file the runtime reads: the tokenizer files, `config.json` (the position
  limit), `generation_config.json` (beams, lengths, special ids), every file of `reorderer/`, `pos_tagger.json`;
* the graph layout (extra inputs, cache shape), the generation config (a copy, read from `generation_config.json`),
  and what the Python front end runs;
* `seal`: a digest of every field (`model.max_position_embeddings`, `generation_config.num_beams`, `files.<name>`,
  ...), so that a hand-edited manifest is refused naming the field (`read_manifest`).

`read_manifest` checks the format and the seal; `verify_files` every recorded file (a missing or changed file, or a
file in the directory the manifest does not list, is named) and the tokenizer's fingerprint; `export_facts` reads
what the runtime takes from the files (never from the manifest) and checks the manifest's copies against them.
Comparing with the model an export came from (`xlpe-export --verify --model`) is `xlpe.export.exporter.verify_export`:
it writes what the model would export now and names the first file that differs (`first_difference`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..features.artefacts import file_digest

MANIFEST_FILE = "export_manifest.json"
FORMAT = "xlpe-onnx-export"
FORMAT_VERSION = (
    5  # the one format read: the layout names its self-attention cache (`GraphLayout`); older: export again
)
SEAL_FIELD = "seal"
VOLATILE_CONFIG_FIELDS = (
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_commit_hash",
    "_attn_implementation_autoset",
    "check_inputs",
)


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


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def seal_entries(manifest: dict) -> dict:
    """A digest of each field of `manifest` but the seal: a dict field by its keys (`model.max_position_embeddings`),
    any other one whole (`opset`)."""
    entries = {}
    for key, value in manifest.items():
        if key == SEAL_FIELD:
            continue
        if isinstance(value, dict) and value:
            entries.update({f"{key}.{sub}": _digest(item) for sub, item in value.items()})
        else:
            entries[key] = _digest(value)
    return entries


def check_seal(manifest: dict, where) -> None:
    """ValueError naming the first field of `manifest` that is not as written (edited, added or removed)."""
    recorded = manifest.get(SEAL_FIELD)
    if not isinstance(recorded, dict):
        raise ValueError(f"{where}: no {SEAL_FIELD!r} field: the manifest was edited or not written by xlpe-export")
    actual = seal_entries(manifest)
    for name in sorted(set(recorded) | set(actual)):
        if name not in actual:
            change = "removed"
        elif name not in recorded:
            change = "added"
        elif actual[name] != recorded[name]:
            change = "edited"
        else:
            continue
        raise ValueError(
            f"{where}: field {name!r} was {change} after export (the manifest's seal does not match it); the "
            "runtime reads no hand-edited manifest: export the model again"
        )


def write_manifest(directory: Path, manifest: dict) -> Path:
    """Write `manifest` (sealed: `seal_entries`) into `directory`."""
    manifest[SEAL_FIELD] = seal_entries(manifest)
    path = Path(directory) / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_manifest(directory) -> dict:
    """The manifest of an export directory, its seal checked; ValueError when it is missing, not one, of another
    format version than `FORMAT_VERSION` (one line naming the directory and the version found) or edited (naming the
    field)."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise ValueError(f"{directory}: no {MANIFEST_FILE}: not a directory written by xlpe-export")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not an xlpe-export manifest (format {FORMAT!r} expected)")
    found = manifest.get("format_version")
    if found != FORMAT_VERSION:
        raise ValueError(
            f"{directory}: an export of format {found!r}; this xlpe reads format {FORMAT_VERSION} only: export again "
            "with xlpe-export"
        )
    check_seal(manifest, path)
    return manifest


def file_digests(directory, exclude=()) -> dict:
    """{relative path: SHA-256} of every file under `directory` but `exclude`, the manifest and hidden files."""
    directory = Path(directory)
    found = {}
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if path.is_file() and name not in exclude and name != MANIFEST_FILE and not _hidden(name):
            found[name] = file_digest(path)
    return found


def _hidden(name: str) -> bool:
    return any(part.startswith(".") for part in name.split("/"))


def _check_file(path: Path, expected: str) -> None:
    if not path.is_file():
        raise ValueError(f"{path}: missing (the export manifest lists it)")
    actual = file_digest(path)
    if actual != expected:
        raise ValueError(
            f"{path}: SHA-256 {actual[:16]}..., the export manifest records {expected[:16]}...: the file was "
            "changed after export"
        )


def verify_files(directory, manifest: dict, tokenizer=None) -> None:
    """ValueError naming the first file that is missing, changed, or not listed (every graph, tokenizer file,
    config, generation config, front-end file), or a tokenizer that is not the recorded one (naming its parts)."""
    directory = Path(directory)
    listed = {MANIFEST_FILE}
    for group in ("graphs", "int8_graphs"):
        for name, entry in (manifest.get(group) or {}).items():
            _check_file(directory / name, entry["sha256"])
            listed.add(name)
    for name, expected in (manifest.get("files") or {}).items():
        _check_file(directory / name, expected)
        listed.add(name)
    extra = sorted(set(file_digests(directory)) - listed)
    if extra:
        raise ValueError(
            f"{directory / extra[0]}: not in the export manifest (xlpe-export did not write it, and the tokenizer or "
            "front end could read it): remove it or export again"
        )
    if tokenizer is not None:
        from ..evaluation.model_loading import differing_parts, fingerprint_of_parts, tokenizer_fingerprint_parts

        recorded = manifest["model"]
        parts = tokenizer_fingerprint_parts(tokenizer)
        actual = fingerprint_of_parts(parts)
        if actual != recorded.get("tokenizer_fingerprint"):
            what = differing_parts(recorded.get("tokenizer_fingerprint_parts"), parts)
            raise ValueError(
                f"{directory}: the tokenizer has fingerprint {actual}"
                + (f" ({what})" if what else "")
                + f", the export manifest records {recorded.get('tokenizer_fingerprint')}: it is not the exported "
                "model's tokenizer"
            )


def _comparable(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in VOLATILE_CONFIG_FIELDS and k != "_from_model_config"}


def read_generation_config(directory) -> dict:
    """`generation_config.json` of `directory` as the search reads it: its fields as `GenerationConfig.from_pretrained`
    gives them in `to_dict()` (whose defaults are all None; tests/export/test_serving.py compares), None, the search's
    "generate's default", left out. Read as JSON, so that translating needs no transformers."""
    path = Path(directory) / "generation_config.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({error})") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(settings).__name__}")
    return {key: value for key, value in _comparable(settings).items() if value is not None}


def export_facts(directory, manifest: dict) -> dict:
    """What the runtime takes from the export's files (`config.json`: the position limit; `generation_config.json`:
    the search settings), ValueError naming a manifest field that says otherwise."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{directory / 'config.json'}: cannot be read ({error})") from None
    facts = {
        "max_position_embeddings": config.get("max_position_embeddings"),
        "generation_config": read_generation_config(directory),
    }
    recorded = manifest["model"].get("max_position_embeddings")
    if recorded != facts["max_position_embeddings"]:
        raise ValueError(
            f"{directory / MANIFEST_FILE}: field 'model.max_position_embeddings' is {recorded!r} but config.json has "
            f"{facts['max_position_embeddings']!r}"
        )
    difference = first_difference(_comparable(manifest.get("generation_config") or {}), facts["generation_config"])
    if difference:
        raise ValueError(
            f"{directory / MANIFEST_FILE}: field 'generation_config' differs from generation_config.json "
            f"({difference}; manifest first, file second)"
        )
    return facts


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def first_difference(before, after, path: str = "") -> str | None:
    """'num_beams: 4 vs 5' for the first place (key order sorted) where two JSON values differ; None if equal."""
    if before == after:
        return None
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in before or key not in after:
                return f"{where}: {'absent' if key not in before else _short(before[key])} vs " + (
                    "absent" if key not in after else _short(after[key])
                )
            found = first_difference(before[key], after[key], where)
            if found:
                return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (a, b) in enumerate(zip(before, after)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
    return f"{path or 'the value'}: {_short(before)} vs {_short(after)}"


def file_difference(exported: Path, expected: Path) -> str:
    """What differs between two files: the first JSON field (library-version fields ignored) or 'the bytes';
    '' when they are the same."""
    a, b = exported.read_bytes(), expected.read_bytes()
    if a == b:
        return ""
    if exported.suffix == ".json":
        try:
            before, after = json.loads(a), json.loads(b)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "the bytes differ"
        if isinstance(before, dict) and isinstance(after, dict):
            before, after = _comparable(before), _comparable(after)
        return first_difference(before, after) or ""
    return "the bytes differ"


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


__all__ = [
    "MANIFEST_FILE",
    "SEAL_FIELD",
    "check_seal",
    "config_digest",
    "export_facts",
    "file_difference",
    "file_digest",
    "file_digests",
    "first_difference",
    "read_generation_config",
    "read_manifest",
    "seal_entries",
    "tool_versions",
    "verify_against_model",
    "verify_files",
    "weights_digest",
    "write_manifest",
]
