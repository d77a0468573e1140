"""xlpe: machine-translation models for HuggingFace Transformers whose position encodings carry cross-lingual
word order.

The package follows the data flow (ARCHITECTURE.md): `features` (text -> model inputs), `models` (the
families; what travels to the Hub as remote code), `training`, `evaluation`, and `cli` (the console scripts).

`import xlpe` warns (one line) when the installed transformers release is outside the range the package was tested
with (README, "Compatibility"). It stays light (no torch, no transformers), so the console scripts answer `--help`
at once: the names exported here (`from xlpe import XLPEMarianConfig`, ...) are imported on first use (PEP 562).

Each family registers itself with the Auto classes (`AutoConfig`, `AutoModel`, `AutoModelForSeq2SeqLM`) and for Hub
custom code where its classes are defined (the bottom of its configuration and modeling files).
`xlpe.register()` imports every family (and registers the pipeline task "xlpe-translation"); it runs on
`import xlpe` when transformers is already imported, and on the first use of a name exported here. A process that
imports xlpe *before* transformers and uses only the Auto classes calls `xlpe.register()` (or imports a name of
xlpe) first.
"""

import importlib
import sys
import warnings

__version__ = "0.5.0"

# public name -> the submodule that defines it; imported on first use (PEP 562), so that `import xlpe.cli.X`
# (every console script) does not pay for torch and transformers before it has parsed its arguments
_EXPORTS = {
    **dict.fromkeys(
        (
            "MODEL_FAMILIES",
            "DPEMarianConfig",
            "DPEMarianModel",
            "DPEMarianMTModel",
            "ModelFamily",
            "MvPEPosConfig",
            "MvPEPosForConditionalGeneration",
            "MvPEPosModel",
            "XLPEMarianConfig",
            "XLPEMarianModel",
            "XLPEMarianMTModel",
            "XLPEReordererConfig",
            "XLPEReordererModel",
            "XLPETranslationPipeline",
            "choose_pe_step",
            "get_family",
            "mvpe_objective",
            "register_family",
            "table5_preset",
        ),
        "models",
    ),
    "OracleReorderTranslator": "evaluation.two_pass",
    "TwoPassTranslator": "evaluation.two_pass",
    "ExtraInputsDataCollator": "training.collator",
}
# old public name -> (new name, its submodule): importable for one release, with a DeprecationWarning
_RENAMED = {"XLPEDataCollator": ("ExtraInputsDataCollator", "training.collator")}


def untested_transformers(installed: str | None = None, accepted: str | None = None) -> str | None:
    """One line saying that the installed transformers release is outside the range this package was tested with
    (its `install_requires`, setup.cfg: the releases CI runs, README "Compatibility"), or None when it is inside,
    or when either fact is unknown (xlpe run from a source tree that was never installed)."""
    from importlib import metadata

    try:
        installed = installed or metadata.version("transformers")
        if accepted is None:
            accepted = next(
                requirement
                for requirement in metadata.requires("xlpe") or []
                if requirement.startswith("transformers") and "extra ==" not in requirement
            )
    except (metadata.PackageNotFoundError, StopIteration):
        return None
    from packaging.requirements import Requirement

    specifier = Requirement(accepted.split(";")[0]).specifier
    if specifier.contains(installed, prereleases=True):
        return None
    return (
        f"xlpe {__version__} is tested with transformers {specifier} but {installed} is installed: results may "
        f'differ silently; pip install "transformers{specifier}"'
    )


def _check_release(stacklevel: int = 3) -> None:
    """Warn once per process (one line) when the installed transformers release is outside the tested range: read
    from the package metadata, so `import xlpe` says it without importing transformers."""
    global _checked_release
    if not _checked_release:
        _checked_release = True
        message = untested_transformers()
        if message:
            warnings.warn(message, UserWarning, stacklevel=stacklevel)


def register() -> None:
    """Register the families with the transformers Auto classes and pipelines (idempotent): imports `xlpe.models`.
    Warns once (one line) when the installed transformers release is outside the tested range."""
    _check_release()
    importlib.import_module(f"{__name__}.models").register_with_transformers()


_checked_release = False
_check_release(stacklevel=3)  # `import xlpe` alone says it (xlpe.models.transformers_compat then stays silent)


if "transformers" in sys.modules:
    register()


def __getattr__(name: str):
    if name in _RENAMED:
        new_name, _ = _RENAMED[name]
        warnings.warn(
            f"xlpe.{name} was renamed {new_name}; the old name goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(new_name)
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(f"{__name__}.models").register_with_transformers()  # the families, with the Auto classes
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "DPEMarianConfig",
    "DPEMarianModel",
    "DPEMarianMTModel",
    "MODEL_FAMILIES",
    "ModelFamily",
    "MvPEPosConfig",
    "MvPEPosForConditionalGeneration",
    "MvPEPosModel",
    "OracleReorderTranslator",
    "ExtraInputsDataCollator",
    "TwoPassTranslator",
    "XLPEMarianConfig",
    "XLPEMarianModel",
    "XLPEMarianMTModel",
    "XLPEReordererConfig",
    "XLPEReordererModel",
    "XLPETranslationPipeline",
    "choose_pe_step",
    "get_family",
    "mvpe_objective",
    "register_family",
    "table5_preset",
]
