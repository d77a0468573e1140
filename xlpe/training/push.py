"""Upload a trained model folder to the Hugging Face Hub: `push_model(...)` and the `xlpe-push` command.

What goes up is what `pipeline("translation", model=repo_id, trust_remote_code=True)` needs, checked before
anything is sent (`check_upload_folder`):

* `config.json` with `auto_map` (config + model classes; not for a stock transformers model type such as a
  `--model_type vanilla` MarianMT run, which loads without custom code) and `custom_pipelines["translation"]`;
* the weights (`model.safetensors`, or shards + index) and `generation_config.json`;
* the tokenizer (`tokenizer_config.json` plus `tokenizer.json` or sentencepiece files);
* a trained POS tagger's file when the config names one (`pos_tagger="perceptron:pos_tagger.json"`);
* the code files: every module named in `auto_map` and `custom_pipelines`, and the sibling files they import
  (`from .x import y`), e.g. `configuration_xlpe.py`, `modeling_xlpe.py`, `pipeline_translation.py`;
* `README.md`, the model card (`xlpe.training.model_card`): the card `xlpe-train` wrote, rendered again with the
  Hub id from its record; written here when missing or when asked to regenerate, from the same facts the folder
  holds (`card_facts.gather_card`: run record, preparation report, results) and the push's arguments.

A folder saved by `model.save_pretrained` of this package has all of it except the tokenizer and card. If
config entries or code files are missing (a folder written by other code), the model is loaded and saved
again in place, which writes them. Then `HfApi.create_repo(exist_ok=True)` and `HfApi.upload_folder`.

Nothing is written to the folder before the Hub is known to be usable: the Hub switched off (HF_HUB_OFFLINE), no
token, a folder that cannot be completed (no tokenizer, no weights), an unreachable endpoint or a refused token
(`create_repo` is the first request) are each one `PushError`/ValueError line with the folder unchanged.
`HF_ENDPOINT` or `endpoint=` select the server (the tests use a local one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from huggingface_hub import HfApi

from .card_facts import gather_card
from .model_card import rerender_for_push, write_model_card

# Training leftovers that do not belong in a model repository.
DEFAULT_IGNORE_PATTERNS = [
    "checkpoint-*/**",
    "runs/**",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state*.pth",
    "*.lock",
    ".cache/**",
]
SENTENCEPIECE_FILES = ("source.spm", "target.spm", "spiece.model", "sentencepiece.bpe.model")


def upload_file_list(
    local_dir, ignore_patterns: Sequence[str] = tuple(DEFAULT_IGNORE_PATTERNS)
) -> tuple[list[str], int]:
    """(the relative paths an upload of `local_dir` sends, how many files the ignore patterns leave out): what
    `push_model` uploads, for `xlpe-push --dry_run`. The folder's lock file (`.xlpe.lock`, held by the push itself)
    is neither sent nor counted."""
    from huggingface_hub.utils import filter_repo_objects

    from ..features.artefacts import LOCK_NAME

    folder = Path(local_dir)
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != LOCK_NAME)
    sent = list(filter_repo_objects(paths, ignore_patterns=list(ignore_patterns)))
    return sent, len(paths) - len(sent)


# ---------------------------------------------------------------------------------------------------------
# What must be in the folder
# ---------------------------------------------------------------------------------------------------------


def code_files(folder: str | Path) -> list[str]:
    """Code files the saved config points at (`auto_map`, `custom_pipelines`) and their relative imports."""
    from transformers.dynamic_module_utils import get_relative_import_files

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    references = []
    for value in (config.get("auto_map") or {}).values():
        references += value if isinstance(value, list) else [value]  # AutoTokenizer maps to [slow, fast]
    references += [entry.get("impl", "") for entry in (config.get("custom_pipelines") or {}).values()]
    # "module.Class" or "repo--module.Class" -> module
    modules = {reference.split("--")[-1].rsplit(".", 1)[0] for reference in references if reference}
    files = {f"{module}.py" for module in modules}
    for module in modules:
        if (folder / f"{module}.py").is_file():
            files.update(Path(path).name for path in get_relative_import_files(str(folder / f"{module}.py")))
    return sorted(files)


def _is_stock(config: Mapping) -> bool:
    """A transformers sequence-to-sequence model type (MarianMT, BART, ...) without custom model code."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

    return config.get("model_type") in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES and not config.get("auto_map")


def check_upload_folder(folder: str | Path) -> list[str]:
    """Problems that would make the uploaded repository unusable (empty list: ready to upload)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return ["config.json is missing"]
    problems = []
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    auto_map = config.get("auto_map") or {}
    for key in ("AutoConfig", "AutoModelForSeq2SeqLM") if not _is_stock(config) else ():
        if key not in auto_map:
            problems.append(f"config.json: auto_map has no {key}")
    if "translation" not in (config.get("custom_pipelines") or {}):
        problems.append('config.json: custom_pipelines has no "translation" entry')
    problems += [f"{name} is missing" for name in code_files(folder) if not (folder / name).is_file()]
    if not ((folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()):
        problems.append("model.safetensors is missing")
    if not (folder / "generation_config.json").is_file():
        problems.append("generation_config.json is missing")
    has_vocabulary = (folder / "tokenizer.json").is_file() or any((folder / n).is_file() for n in SENTENCEPIECE_FILES)
    if not (folder / "tokenizer_config.json").is_file() or not has_vocabulary:
        problems.append("the tokenizer is missing (save it with tokenizer.save_pretrained(folder))")
    if not (folder / "README.md").is_file():
        problems.append("README.md (model card) is missing")
    tagger = config.get("pos_tagger")
    if (
        isinstance(tagger, str)
        and tagger.startswith("perceptron:")
        and not (folder / tagger.split(":", 1)[1]).is_file()
    ):
        problems.append(
            f"the POS tagger file of pos_tagger={tagger!r} is missing (model.save_pretrained(folder) writes it)"
        )
    return problems


def prepare_upload_folder(
    folder: str | Path, card_kwargs: Mapping | None = None, regenerate_card: bool = False
) -> None:
    """Make `folder` complete (module docstring) or raise ValueError listing what cannot be fixed here."""
    folder = Path(folder)
    problems = check_upload_folder(folder)
    if not any(p in ("config.json is missing", "model.safetensors is missing") for p in problems):
        check_loads_whole(folder)  # before anything is written
    if any("auto_map" in p or "custom_pipelines" in p or p.endswith(".py is missing") for p in problems):
        if _is_stock(json.loads((folder / "config.json").read_text(encoding="utf-8"))):
            from ..models.hub_support import add_translation_pipeline

            add_translation_pipeline(folder)  # a stock model: only the pipeline's entry and code files
        else:
            from transformers import (
                AutoModelForSeq2SeqLM,  # the xlpe families are registered on package import
            )

            from ..evaluation.model_loading import load_whole

            load_whole(AutoModelForSeq2SeqLM, folder).save_pretrained(folder)  # config entries + code files
    # a card xlpe-train wrote is rendered again from what it recorded, with the Hub id (unless edited since)
    # a folder without that record: the same facts gathered from what the folder holds (run record, preparation
    # report, results), with the push's arguments over them
    if not rerender_for_push(folder, card_kwargs or {}, regenerate=regenerate_card) and (
        regenerate_card or not (folder / "README.md").is_file()
    ):
        given = {key: value for key, value in dict(card_kwargs or {}).items() if value not in (None, [], (), "")}
        write_model_card(folder, **{**gather_card(folder), **given})
    problems = check_upload_folder(folder)
    if problems:
        raise ValueError(f"{folder} cannot be uploaded yet:\n  - " + "\n  - ".join(problems))


# ---------------------------------------------------------------------------------------------------------
# Upload
# ---------------------------------------------------------------------------------------------------------


def push_model(
    local_dir: str | Path,
    repo_id: str,
    token: str | None = None,
    private: bool | None = None,
    endpoint: str | None = None,
    revision: str | None = None,
    commit_message: str = "Upload xlpe translation model",
    card_kwargs: Mapping | None = None,
    regenerate_card: bool = False,
    ignore_patterns: Sequence[str] = tuple(DEFAULT_IGNORE_PATTERNS),
    api: HfApi | None = None,
):
    """Check/complete `local_dir`, create `repo_id` if needed and upload the folder (one commit for a
    model-sized folder; huggingface_hub splits very large ones).

    `card_kwargs` go to `xlpe.training.model_card.build_model_card` (languages, license, datasets, base_model,
    eval_results, training, ...) when the card is written; `repo_id` is filled in. Returns the
    `CommitInfo` of the upload.
    """
    card_kwargs = {"repo_id": repo_id, **dict(card_kwargs or {})}
    if api is None:  # (a caller's own api brings its own endpoint and token)
        token = check_hub_access(token)
        api = HfApi(endpoint=endpoint, token=token)
    check_fixable(local_dir)
    try:  # the first request: an unreachable Hub or a refused token fails here, before the folder is touched
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    except (OSError, *_http_errors()) as error:
        raise PushError(
            f"{repo_id}: the Hub refused or could not be reached ({_one_line(error)}); nothing was "
            f"written to {local_dir} or uploaded"
        ) from None
    prepare_upload_folder(local_dir, card_kwargs, regenerate_card=regenerate_card)
    try:
        return api.upload_folder(
            repo_id=repo_id,
            folder_path=str(local_dir),
            repo_type="model",
            revision=revision,
            commit_message=commit_message,
            ignore_patterns=list(ignore_patterns),
        )
    except (OSError, *_http_errors()) as error:
        raise PushError(
            f"{repo_id}: the upload failed ({_one_line(error)}); the folder was completed for it "
            f"(model card, code files) and can be pushed again"
        ) from None


# ---------------------------------------------------------------------------------------------------------
# Before anything is written: the Hub can be used, the folder can be completed
# ---------------------------------------------------------------------------------------------------------


class PushError(ValueError):
    """The Hub cannot be used (offline, no token, unreachable, refused): one line, said before the model folder
    is written to."""


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(error).__name__


def _http_errors() -> tuple[type, ...]:
    """The HTTP client's transport errors (connection refused, DNS, timeout): not OSErrors."""
    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(__import__(name).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def hub_is_offline() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set now, or huggingface_hub told so at import."""
    from huggingface_hub import constants

    now = any(
        os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    return now or bool(constants.HF_HUB_OFFLINE)


def check_hub_access(token: str | None = None) -> str:
    """The token to upload with (`token`, else HF_TOKEN or the saved login); PushError when the Hub is switched
    off or no token is found, so that a push that cannot happen changes nothing."""
    from huggingface_hub import get_token

    if hub_is_offline():
        raise PushError(
            "the Hub is switched off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set): unset it to push; "
            "nothing was written or uploaded"
        )
    token = token or get_token()
    if not token:
        raise PushError(
            "no Hub token: pass --token, set HF_TOKEN or log in (`hf auth login`); nothing was written or uploaded"
        )
    return token


def check_fixable(folder: str | Path) -> None:
    """ValueError listing what `prepare_upload_folder` could not fix (a missing tokenizer or weights), before it
        writes anything: only config entries, code files and the card are completed there. The folder's model must
    load whole (`xlpe.evaluation.model_loading.load_whole`: config.json and the weights agree)."""
    fixable = lambda p: (
        "auto_map" in p or "custom_pipelines" in p or p.endswith(".py is missing") or p.startswith("README.md")
    )
    problems = [p for p in check_upload_folder(folder) if not fixable(p)]
    if problems:
        raise ValueError(f"{folder} cannot be uploaded: " + "; ".join(problems))
    check_loads_whole(folder)


def check_loads_whole(folder: str | Path) -> None:
    """The load rule (`xlpe.evaluation.model_loading.load_whole`): a folder whose config.json and weights
    disagree is not uploaded (WeightsConfigMismatch, a ValueError in one line)."""
    from transformers import AutoModelForSeq2SeqLM

    from ..evaluation.model_loading import load_whole

    load_whole(AutoModelForSeq2SeqLM, folder)


# ---------------------------------------------------------------------------------------------------------
# xlpe-push
# ---------------------------------------------------------------------------------------------------------
