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
Importing this package is light: the names below and the families' classes are imported on first use (PEP 562).
Each family registers its classes with the Auto classes at the bottom of its configuration and modeling files
(in a copy travelling as remote code it leaves that to transformers); `register_with_transformers` imports them all.
"""

import importlib

from .registry import MODEL_FAMILIES, ModelFamily, declares_field, get_family, register_family

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
# Registration with transformers: each family's files register its classes where they are defined (the
# bottom of its configuration and modeling files); this imports them all and adds the pipeline task
# ---------------------------------------------------------------------------------------------------------


def register_with_transformers() -> None:
    """Import every registered family's classes (and the standalone reorderer's), which registers them with the
    Auto classes and for Hub custom code, and register the in-memory pipeline task "xlpe-translation".
    Idempotent. `xlpe.register()` calls it (so does `import xlpe` when transformers is already imported)."""
    from transformers import AutoModelForSeq2SeqLM
    from transformers.pipelines import PIPELINE_REGISTRY

    from . import modeling_reorderer  # noqa: F401  (the standalone reorderer: AutoConfig / AutoModel load it)
    from .pipeline_translation import XLPETranslationPipeline

    global _registered
    for family in list(MODEL_FAMILIES.values()):
        family.generation_model_class  # noqa: B018  (imports, and so registers, the family's classes)
    if not _registered:
        PIPELINE_REGISTRY.register_pipeline(
            "xlpe-translation", pipeline_class=XLPETranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
        _registered = True


_registered = False


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
