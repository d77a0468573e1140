"""A copy of a saved translation model that `pipeline("translation", model=dir, trust_remote_code=True)` loads.

transformers 5 removed its "translation" task; that call works only for a folder whose config.json names a
custom translation pipeline and carries its code. Every model xlpe saves has both (the families through
`save_pretrained`, stock runs through `xlpe.models.hub_support.add_translation_pipeline`). For a checkpoint
made elsewhere (an OPUS-MT model, a BART fine-tuned with other code), `copy_with_translation_pipeline(source,
destination)` writes a copy of the folder with the pipeline added and leaves the source untouched; the command
is `python -m xlpe.cli.add_pipeline SOURCE DESTINATION` (docs/command_line.md).

The destination follows the rule of every xlpe output (`xlpe.features.outputs.check_destination`): never over or
inside the source, an existing directory replaced only with `overwrite` and only when it holds a model; the copy
is made in a sibling staging folder and renamed into place, so a failure leaves no half-written destination.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..models.hub_support import add_translation_pipeline, check_translation_pipeline_folder
from .artefacts import LOCK_NAME
from .outputs import check_destination


def copy_with_translation_pipeline(
    source: str | os.PathLike,
    destination: str | os.PathLike,
    *,
    overwrite: bool = False,
    flag: str = "destination",
) -> Path:
    """Copy the model folder `source` (config.json, weights, tokenizer) to `destination` and add the translation
    pipeline there (`add_translation_pipeline`: its code files and config.json's `custom_pipelines` entry); returns
    the destination. `source` is only read. ValueError (one line) for a source that is not a local model folder
    or cannot carry the pipeline, and for a destination the output rule refuses (`flag` names it)."""
    source_path = Path(os.path.expanduser(os.fspath(source)))
    if not source_path.is_dir():
        raise ValueError(f"source {os.fspath(source)}: no such local directory (a saved model folder is expected)")
    check_translation_pipeline_folder(source_path)  # refusals name the source, before anything is written
    check_destination(destination, flag, {"source": source}, overwrite=overwrite, kind="dir", owns=("model",))
    target = Path(os.path.expanduser(os.fspath(destination)))
    staging = target.with_name(f".{target.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        shutil.copytree(source_path, staging, ignore=shutil.ignore_patterns(LOCK_NAME))
        add_translation_pipeline(staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
