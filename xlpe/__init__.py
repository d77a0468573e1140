"""xlpe: machine-translation models for HuggingFace Transformers whose position encodings carry cross-lingual
word order.

The package follows the data flow (ARCHITECTURE.md): `features` (text -> model inputs), `models` (the
families; what travels to the Hub as remote code), `training`, `evaluation`, and `cli` (the console scripts).

Importing the package registers every model family with the Auto classes (`AutoConfig`, `AutoModel`,
`AutoModelForSeq2SeqLM`), marks the classes for Hub custom code (so `save_pretrained` writes `auto_map`
and the code files), and registers the in-memory pipeline task "xlpe-translation".
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from . import _deprecated
from .evaluation.two_pass import OracleReorderTranslator, TwoPassTranslator
from .models import (
    MODEL_FAMILIES,
    DPEMarianConfig,
    DPEMarianModel,
    DPEMarianMTModel,
    ModelFamily,
    MvPEPosConfig,
    MvPEPosForConditionalGeneration,
    MvPEPosModel,
    XLPEMarianConfig,
    XLPEMarianModel,
    XLPEMarianMTModel,
    XLPEReordererConfig,
    XLPEReordererModel,
    XLPETranslationPipeline,
    choose_pe_step,
    get_family,
    mvpe_objective,
    register_family,
    table5_preset,
)
from .training.collator import XLPEDataCollator

__version__ = "0.3.0"

for _family in MODEL_FAMILIES.values():
    AutoConfig.register(_family.config_class.model_type, _family.config_class, exist_ok=True)
    AutoModel.register(_family.config_class, _family.base_model_class, exist_ok=True)
    AutoModelForSeq2SeqLM.register(_family.config_class, _family.generation_model_class, exist_ok=True)
    _family.config_class.register_for_auto_class()
    _family.base_model_class.register_for_auto_class("AutoModel")
    _family.generation_model_class.register_for_auto_class("AutoModelForSeq2SeqLM")

# the standalone reorderer (xlpe-reorder): AutoConfig/AutoModel load it, and its directory carries its code
AutoConfig.register(XLPEReordererConfig.model_type, XLPEReordererConfig, exist_ok=True)
AutoModel.register(XLPEReordererConfig, XLPEReordererModel, exist_ok=True)
XLPEReordererConfig.register_for_auto_class()
XLPEReordererModel.register_for_auto_class("AutoModel")

PIPELINE_REGISTRY.register_pipeline(
    "xlpe-translation", pipeline_class=XLPETranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
)
_deprecated.install()

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
    "TwoPassTranslator",
    "XLPEDataCollator",
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
