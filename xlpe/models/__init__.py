"""The model families and what they are built from: everything here travels to the Hub as remote code.

Rule: these files form a flat set with single-dot sibling imports (`from .x import y`) and import nothing else
of xlpe, so `save_pretrained` copies a working set of them next to the weights, and
`pipeline("translation", model=dir, trust_remote_code=True)` runs where the package is not installed
(tests/test_layers.py checks the rule).

One file pair per family (the configuration, then the model):
    configuration_xlpe.py      modeling_xlpe.py        XL PE (Ding et al.): InXL, HeadXL, Combination
    configuration_dpe.py       modeling_dpe.py         DPE (Zheng et al.) + the Table 5 baselines
    configuration_mvpe_pos.py  modeling_mvpe_pos.py    mvPE + POS tags (on BART)
Shared building blocks (written once, imported by the families):
    seq2seq_scaffold.py   encoder-decoder body, generation head, output assembly, the translation loss
    extra_inputs.py       the per-token extra inputs (names, sides, pad rules) and their checks
    transformers_compat.py  what differs between the accepted transformers releases (the decoder cache's name)
    sinusoid.py           sinusoid tables (absolute, mvPE step k)
    reorder_predictor.py  the in-model reorderer that supplies XL positions at test time (built-in, small)
    configuration_position_options.py, position_attention.py   relative PE, RoPE, DiSAN-style heads, no
                          absolute PE, XL heads (the XL PE paper's baselines) as options of every Marian-based family
    configuration_source_tags.py, source_tags.py   source POS tags added to the input of every Marian-based
                          family (XL PE + POS, DPE + POS)
The standalone reorderer (XL PE's test-time preorderer; `xlpe-reorder`, can ride inside an XL PE checkpoint):
    configuration_reorderer.py  modeling_reorderer.py  btg_chart.py (exact CKY over BTG trees)
    tag_sets.py, taggers.py, pos_tagging_hub.py   POS tag ids, the tagger registry (every POS tagger once, for
                          preparation and the pipeline) and the raw-text tags of a saved model's pipeline
    hub_support.py        save/load plumbing: custom pipeline entry, stock-checkpoint upgrade
    pipeline_translation.py  the "translation" pipeline (raw text in, translations out)
    length_rule.py        the length rule of every decoding path (per-sentence budget, limits, what is reported)
    length_limits.py      its numbers and reports without torch (the ONNX runtime's; length_rule.py re-exports them)
    registry.py           the registries of families, strategies and extra inputs; light (no torch), not
                          needed by remote code; strategies.py and extra_input_specs.py hold the tables it shares
                          with the remote code
Importing this package is light: the names below and the families' classes are imported on first use, and the
Auto registration (`register_with_transformers`) runs when transformers is imported (`xlpe.register`).
"""

import importlib
import importlib.abc
import importlib.machinery
import sys

from .registry import MODEL_FAMILIES, ModelFamily, declares_field, get_family, on_register, register_family

# The families are the rows of `registry.BUILTIN_FAMILIES` (see CONTRIBUTING.md, "Adding a position-encoding
# family"); their classes and the names below are imported on first use (PEP 562), so that the CLIs read the
# registry without building every model module.
_EXPORTS = {
    "DPEMarianConfig": "configuration_dpe",
    "table5_preset": "configuration_dpe",
    "MvPEPosConfig": "configuration_mvpe_pos",
    "choose_pe_step": "configuration_mvpe_pos",
    "mvpe_objective": "configuration_mvpe_pos",
    "XLPEReordererConfig": "configuration_reorderer",
    "XLPEMarianConfig": "configuration_xlpe",
    "DPEMarianModel": "modeling_dpe",
    "DPEMarianMTModel": "modeling_dpe",
    "MvPEPosForConditionalGeneration": "modeling_mvpe_pos",
    "MvPEPosModel": "modeling_mvpe_pos",
    "XLPEReordererModel": "modeling_reorderer",
    "XLPEMarianModel": "modeling_xlpe",
    "XLPEMarianMTModel": "modeling_xlpe",
    "XLPETranslationPipeline": "pipeline_translation",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    register_with_transformers()  # as the eager import of these names always did
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


# ---------------------------------------------------------------------------------------------------------
# Registration with transformers (Auto classes, Hub custom code, the pipeline task)
# ---------------------------------------------------------------------------------------------------------

_registered = False
_running = False
_pending = False  # asked for while a model module was being imported: done when that import has finished
_importing = 0  # depth of the xlpe.models submodule imports in progress


def _register_family(family: ModelFamily) -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    AutoConfig.register(family.config_class.model_type, family.config_class, exist_ok=True)
    AutoModel.register(family.config_class, family.base_model_class, exist_ok=True)
    AutoModelForSeq2SeqLM.register(family.config_class, family.generation_model_class, exist_ok=True)
    family.config_class.register_for_auto_class()
    family.base_model_class.register_for_auto_class("AutoModel")
    family.generation_model_class.register_for_auto_class("AutoModelForSeq2SeqLM")


def register_with_transformers() -> None:
    """Every registered family (and the standalone reorderer) with the Auto classes and for Hub custom code, and
    the in-memory pipeline task "xlpe-translation"; a family registered later is registered at once. Idempotent.
    `xlpe` calls it as soon as transformers is imported (`xlpe.register`). Asked for while a model module is being
    imported (that import brought transformers in), it runs right after that import has finished."""
    global _registered, _pending, _running
    if _registered or _running:  # done, or under way (the imports below finish here again)
        return
    if _importing:
        _pending = True
        return
    _running = True
    try:
        _register_all()
        _registered = True
    finally:
        _running = _pending = False
    on_register(_register_family)


def _register_all() -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
    from transformers.pipelines import PIPELINE_REGISTRY

    from .configuration_reorderer import XLPEReordererConfig
    from .modeling_reorderer import XLPEReordererModel
    from .pipeline_translation import XLPETranslationPipeline

    for family in list(MODEL_FAMILIES.values()):
        _register_family(family)
    # the standalone reorderer (xlpe-reorder): AutoConfig/AutoModel load it, and its directory carries its code
    AutoConfig.register(XLPEReordererConfig.model_type, XLPEReordererConfig, exist_ok=True)
    AutoModel.register(XLPEReordererConfig, XLPEReordererModel, exist_ok=True)
    XLPEReordererConfig.register_for_auto_class()
    XLPEReordererModel.register_for_auto_class("AutoModel")
    PIPELINE_REGISTRY.register_pipeline(
        "xlpe-translation", pipeline_class=XLPETranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
    )


_register_with_transformers = register_with_transformers  # the old private name


class _FinishPendingRegistration(importlib.abc.MetaPathFinder):
    """Counts the imports of this package's submodules in progress and, when the outermost one has finished, runs
    a registration asked for meanwhile (transformers imported from inside a model module: the model classes
    cannot be read before their module is complete)."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(f"{__name__}.") or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            global _importing
            _importing += 1
            try:
                load(module)
            finally:
                _importing -= 1
            if _pending and not _importing:
                register_with_transformers()

        spec.loader.exec_module = exec_module
        return spec


if not any(type(finder).__name__ == "_FinishPendingRegistration" for finder in sys.meta_path):
    sys.meta_path.insert(0, _FinishPendingRegistration())


__all__ = [
    "DPEMarianConfig",
    "DPEMarianModel",
    "DPEMarianMTModel",
    "MODEL_FAMILIES",
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
    "declares_field",
    "get_family",
    "mvpe_objective",
    "register_family",
    "register_with_transformers",
    "table5_preset",
]
