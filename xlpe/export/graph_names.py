"""What an export's graphs are called and take, without torch: the file names (`ENCODER_FILE`, ...; `int8_name`
for their int8 copies) and `GraphLayout`, the manifest's `layout` (the family's extra inputs and the cache's shape).
graphs.py (the export) and runtime.py (the translation, where torch need not be installed) both read them here.
"""

from __future__ import annotations

from dataclasses import dataclass

ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE = (
    "encoder_model.onnx",
    "decoder_model.onnx",
    "decoder_with_past_model.onnx",
)
GRAPH_FILES = (ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE)
DEFAULT_OPSET = 17
SELF_ATTENTION_CACHES = ("indirect", "appended")  # the step graph's two forms (graphs.py, module docstring)


@dataclass(frozen=True)
class GraphLayout:
    """What the graphs of one model take: its family's extra inputs and the shape of its cache."""

    family: str
    source_tags: bool  # encoder input `pos_tag_ids`
    reorder_positions: bool  # encoder input `reorder_positions` (an attached standalone reorderer decodes them)
    predicted_positions: bool  # XL PE: the encoder graph also gives the `reorder_positions` it used
    tagger_window: int  # mvPE+POS decoder tags: window of the hypothesis tagger (0: none)
    decoder_layers: int
    decoder_heads: int
    head_dim: int
    self_attention_cache: str  # one of SELF_ATTENTION_CACHES (module docstring)

    def __post_init__(self):
        if self.self_attention_cache not in SELF_ATTENTION_CACHES:
            raise ValueError(
                f"self_attention_cache must be one of {SELF_ATTENTION_CACHES}, got {self.self_attention_cache!r}"
            )

    @property
    def indirect_cache(self) -> bool:
        """The step graph reads buffers through `cache_indirection` (else it gives the step's keys to append)."""
        return self.self_attention_cache == "indirect"

    @property
    def encoder_inputs(self) -> list[str]:
        extra = (["reorder_positions"] if self.reorder_positions else []) + (
            ["pos_tag_ids"] if self.source_tags else []
        )
        return ["input_ids", "attention_mask", *extra]

    @property
    def encoder_outputs(self) -> list[str]:
        return ["last_hidden_state"] + (["reorder_positions"] if self.predicted_positions else [])

    def cache_names(self, prefix: str, sides=("decoder", "encoder")) -> list[str]:
        return [
            f"{prefix}.{layer}.{side}.{kind}"
            for layer in range(self.decoder_layers)
            for side in sides
            for kind in ("key", "value")
        ]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def int8_name(file_name: str) -> str:
    """The file name of a graph's int8 copy (`--quantize int8`)."""
    return file_name.replace(".onnx", "_int8.onnx")


__all__ = [
    "DECODER_FILE",
    "DECODER_WITH_PAST_FILE",
    "DEFAULT_OPSET",
    "ENCODER_FILE",
    "GRAPH_FILES",
    "SELF_ATTENTION_CACHES",
    "GraphLayout",
    "int8_name",
]
