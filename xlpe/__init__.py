"""xlpe: machine-translation models for HuggingFace Transformers whose position encodings carry cross-lingual
word order.

Importing the package registers every model family with the Auto classes (`AutoConfig`, `AutoModel`,
`AutoModelForSeq2SeqLM`), marks the classes for Hub custom code (so `save_pretrained` writes `auto_map`
and the code files), and registers the in-memory pipeline task "xlpe-translation".
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .collator import XLPEDataCollator
from .configuration_dpe import DPEMarianConfig, table5_preset
from .configuration_mvpe_pos import MvPEPosConfig, choose_pe_step, mvpe_objective
from .configuration_xlpe import XLPEMarianConfig
from .modeling_dpe import DPEMarianModel, DPEMarianMTModel
from .modeling_mvpe_pos import MvPEPosForConditionalGeneration, MvPEPosModel
from .modeling_xlpe import XLPEMarianModel, XLPEMarianMTModel
from .pipeline_translation import XLPETranslationPipeline
from .registry import MODEL_FAMILIES, ModelFamily, get_family, register_family
from .two_pass import OracleReorderTranslator, TwoPassTranslator

__version__ = "0.1.0"

# --- families (one line each; see CONTRIBUTING.md) ---
register_family(ModelFamily("xlpe", XLPEMarianConfig, XLPEMarianModel, XLPEMarianMTModel))
register_family(ModelFamily("dpe", DPEMarianConfig, DPEMarianModel, DPEMarianMTModel))
register_family(ModelFamily("mvpe_pos", MvPEPosConfig, MvPEPosModel, MvPEPosForConditionalGeneration))
# --- end of families ---

for _family in MODEL_FAMILIES.values():
    AutoConfig.register(_family.config_class.model_type, _family.config_class, exist_ok=True)
    AutoModel.register(_family.config_class, _family.base_model_class, exist_ok=True)
    AutoModelForSeq2SeqLM.register(_family.config_class, _family.generation_model_class, exist_ok=True)
    _family.config_class.register_for_auto_class()
    _family.base_model_class.register_for_auto_class("AutoModel")
    _family.generation_model_class.register_for_auto_class("AutoModelForSeq2SeqLM")

PIPELINE_REGISTRY.register_pipeline(
    "xlpe-translation", pipeline_class=XLPETranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
)

__all__ = [
    "DPEMarianConfig",
    "DPEMarianModel",
    "DPEMarianMTModel",
    "MODEL_FAMILIES",
    "MvPEPosConfig",
    "MvPEPosForConditionalGeneration",
    "MvPEPosModel",
    "OracleReorderTranslator",
    "TwoPassTranslator",
    "XLPEDataCollator",
    "XLPEMarianConfig",
    "XLPEMarianModel",
    "XLPEMarianMTModel",
    "XLPETranslationPipeline",
    "choose_pe_step",
    "get_family",
    "mvpe_objective",
    "register_family",
    "table5_preset",
]
