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
    configuration_position_options.py, position_attention.py   relative PE, RoPE, DiSAN-style heads, no absolute PE, XL heads
                          (the XL PE paper's baselines) as options of every Marian-based family
    configuration_source_tags.py, source_tags.py   source POS tags added to the input of every Marian-based
                          family (XL PE + POS, DPE + POS)
The standalone reorderer (XL PE's test-time preorderer; `xlpe-reorder`, can ride inside an XL PE checkpoint):
    configuration_reorderer.py  modeling_reorderer.py  btg_chart.py (exact CKY over BTG trees)
    tag_sets.py, taggers.py, pos_tagging_hub.py   POS tag ids, the tagger registry (every POS tagger once, for
                          preparation and the pipeline) and the raw-text tags of a saved model's pipeline
    hub_support.py        save/load plumbing: custom pipeline entry, stock-checkpoint upgrade
    pipeline_translation.py  the "translation" pipeline (raw text in, translations out)
    registry.py           the family registry (`--model_type NAME`); not needed by remote code
"""

from .configuration_dpe import DPEMarianConfig, table5_preset
from .configuration_mvpe_pos import MvPEPosConfig, choose_pe_step, mvpe_objective
from .configuration_reorderer import XLPEReordererConfig
from .configuration_xlpe import XLPEMarianConfig
from .modeling_dpe import DPEMarianModel, DPEMarianMTModel
from .modeling_mvpe_pos import MvPEPosForConditionalGeneration, MvPEPosModel
from .modeling_reorderer import XLPEReordererModel
from .modeling_xlpe import XLPEMarianModel, XLPEMarianMTModel
from .pipeline_translation import XLPETranslationPipeline
from .registry import MODEL_FAMILIES, ModelFamily, declares_field, get_family, register_family

# --- families (one line each; see CONTRIBUTING.md, "Adding a position-encoding family") ---
register_family(ModelFamily("xlpe", XLPEMarianConfig, XLPEMarianModel, XLPEMarianMTModel))
register_family(ModelFamily("dpe", DPEMarianConfig, DPEMarianModel, DPEMarianMTModel))
register_family(ModelFamily("mvpe_pos", MvPEPosConfig, MvPEPosModel, MvPEPosForConditionalGeneration))
# --- end of families ---


def _register_with_transformers() -> None:
    """Every family (and the standalone reorderer) with the Auto classes and for Hub custom code, and the
    in-memory pipeline task "xlpe-translation". Runs once, on the first import of `xlpe.models` (which every
    exported name of `xlpe` and every xlpe module that builds or loads a model goes through)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
    from transformers.pipelines import PIPELINE_REGISTRY

    for family in MODEL_FAMILIES.values():
        AutoConfig.register(family.config_class.model_type, family.config_class, exist_ok=True)
        AutoModel.register(family.config_class, family.base_model_class, exist_ok=True)
        AutoModelForSeq2SeqLM.register(family.config_class, family.generation_model_class, exist_ok=True)
        family.config_class.register_for_auto_class()
        family.base_model_class.register_for_auto_class("AutoModel")
        family.generation_model_class.register_for_auto_class("AutoModelForSeq2SeqLM")
    # the standalone reorderer (xlpe-reorder): AutoConfig/AutoModel load it, and its directory carries its code
    AutoConfig.register(XLPEReordererConfig.model_type, XLPEReordererConfig, exist_ok=True)
    AutoModel.register(XLPEReordererConfig, XLPEReordererModel, exist_ok=True)
    XLPEReordererConfig.register_for_auto_class()
    XLPEReordererModel.register_for_auto_class("AutoModel")
    PIPELINE_REGISTRY.register_pipeline(
        "xlpe-translation", pipeline_class=XLPETranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
    )


_register_with_transformers()

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
    "table5_preset",
]
