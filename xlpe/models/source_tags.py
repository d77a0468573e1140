"""Source POS-tag encoding of the Marian-based families (XL PE + POS, DPE + POS; fields in
configuration_source_tags.py, where the choice of *adding* the tags rather than concatenating them is explained).

    X = E[w_t] * scale + T[tag_t] * scale        (then + PE_abs, + the family's position signal)

T is a learned (num_tag_ids x d_model) table, initialised like the token embeddings (N(0, init_std), the <pad>
row zero; all zero when a stock checkpoint is upgraded, `zero_init_added_tables`: X is then the stock input) and
scaled by the same `embed_scale`, so that tags enter at the words' magnitude. Everything after
the input sees X: XL PE's reorder predictor too (tags are a strong cue for the reordering), DPE's block.

`SourceTagsPipelineMixin` gives a model the translation pipeline's hook: raw source text is tagged with the
configured tagger (pos_tagging_hub.RawTextTagger, the projection onto sub-word tokens mvPE+POS uses). A trained
tagger file ("perceptron:<file>") travels with the model: `save_pretrained` writes it beside the weights as
pos_tagger.json and the saved config names it so, which `from_pretrained` (local or Hub) then finds.

Flat file, single-dot imports only: it travels as Hub custom code with the modeling files.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from transformers import initialization as hf_init  # (as hub_support: no import of it, no cycle)
from transformers.utils import logging

from .extra_inputs import checked_tag_ids
from .pos_tagging_hub import PERCEPTRON_PREFIX, SAVED_TAGGER_FILE, RawTextTagger, resolve_tagger_file, tagger_file_name
from .tag_sets import PAD_TAG_ID, UNK_TAG_ID

logger = logging.get_logger(__name__)


class SourceTagTable(nn.Embedding):
    """T: one d_model row per tag id, <pad> (0) a zero row. Initialises itself (`init_own_parameters`, which
    `_init_weights` calls after the stock embedding init, also for a table a checkpoint lacks): N(0, init_std),
    or all zero when `zero_init` (an upgraded stock checkpoint keeps its function)."""

    def __init__(self, num_tag_ids: int, d_model: int, init_std: float, zero_init: bool):
        super().__init__(num_tag_ids, d_model, padding_idx=PAD_TAG_ID)
        self.init_std, self.zero_init = init_std, zero_init

    @torch.no_grad()
    def init_own_parameters(self) -> None:
        if getattr(self.weight, "_is_hf_initialized", False):  # loaded from a checkpoint: kept
            return
        if self.zero_init:  # X + T[tag] * scale = X: the stock encoder input at step 0
            hf_init.zeros_(self.weight)
        else:
            hf_init.normal_(self.weight, 0.0, self.init_std)
            self.weight[PAD_TAG_ID].zero_()


class SourceTagEncoding(nn.Module):
    """Tag id -> d_model vector T[tag] * scale, added to the scaled token embeddings of the encoder input."""

    def __init__(self, config, embed_scale: float):
        super().__init__()
        self.num_tag_ids, self.embed_scale = config.num_source_tag_ids(), embed_scale
        zero_init = bool(getattr(config, "zero_init_added_tables", False))  # an upgrade: T starts at 0
        self.table = SourceTagTable(self.num_tag_ids, config.d_model, config.init_std, zero_init)
        self.check = config.check_inputs

    def forward(
        self, inputs_embeds: torch.Tensor, pos_tag_ids: torch.Tensor | None, mask: torch.Tensor
    ) -> torch.Tensor:
        """`inputs_embeds` [batch, T, d] (scaled words) + the tag encoding of `pos_tag_ids` [batch, T] (tag ids on
        real tokens: 1 unknown, 2 special, 3.. config.pos_tags; pad slots may hold anything). Omitted: every
        token gets the <unk> tag, with a warning (a tagged model should be given its tags)."""
        shape = tuple(inputs_embeds.shape[:2])
        if pos_tag_ids is None:
            logger.warning_once(
                "no `pos_tag_ids` given to a model with source POS tags (config.pos_tagger): every "
                "source token is tagged <unk>"
            )
            pos_tag_ids = torch.full(shape, UNK_TAG_ID, dtype=torch.long, device=inputs_embeds.device)
            pos_tag_ids = pos_tag_ids.masked_fill(~mask, PAD_TAG_ID)
        else:
            pos_tag_ids = checked_tag_ids("pos_tag_ids", pos_tag_ids, shape, mask, self.num_tag_ids, self.check)
        return inputs_embeds + (self.table(pos_tag_ids) * self.embed_scale).to(inputs_embeds.dtype)


class SourceTagsPipelineMixin:
    """The translation pipeline's hook (`prepare_pipeline_inputs`): tags raw source text with `config.pos_tagger`."""

    _raw_text_tagger: RawTextTagger | None = None

    def raw_text_tagger(self) -> RawTextTagger:
        """The configured tagger of raw source text (built once; `.unknown_tags` counts out-of-vocabulary tags)."""
        if self._raw_text_tagger is None:
            self._raw_text_tagger = RawTextTagger(
                self.config.pos_tagger,
                self.config.pos_tags,
                self.config.nltk_data,
                model_dir=getattr(self.config, "_name_or_path", None) or None,
            )
        return self._raw_text_tagger

    _tagger_file: tuple[str, bytes] | None = None  # (pos_tagger, the bytes of its file), read at the first save

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, plus the source tagger's file when it is a trained one
        ("perceptron:<file>"): written to `save_directory`/pos_tagger.json, named so in the saved config. The file
        is read once and kept, so later saves work after the directory it came from is gone (a resumed run
        whose checkpoint the Trainer rotates away)."""
        file_name = tagger_file_name(self.config.pos_tagger) if self.config.uses_extra_input("pos_tag_ids") else None
        if file_name is None or not kwargs.get("is_main_process", True):
            return super().save_pretrained(save_directory, *args, **kwargs)
        if self._tagger_file is None or self._tagger_file[0] != self.config.pos_tagger:
            with open(
                resolve_tagger_file(file_name, getattr(self.config, "_name_or_path", None) or None), "rb"
            ) as handle:
                self._tagger_file = (self.config.pos_tagger, handle.read())
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, SAVED_TAGGER_FILE), "wb") as handle:
            handle.write(self._tagger_file[1])
        original, self.config.pos_tagger = self.config.pos_tagger, PERCEPTRON_PREFIX + SAVED_TAGGER_FILE
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.config.pos_tagger = original

    def prepare_pipeline_inputs(self, texts: list[str], tokenizer, encoded) -> dict:
        """{"pos_tag_ids": [batch, tokens]} for raw `texts` encoded as `encoded`; {} for a model without tags."""
        if not self.config.uses_extra_input("pos_tag_ids"):
            return {}
        tagger = self.raw_text_tagger()
        before = sum(tagger.unknown_tags.values())
        tag_ids = tagger.token_tag_ids(list(texts), encoded)
        if sum(tagger.unknown_tags.values()) > before:
            logger.warning_once(f"tags outside config.pos_tags were mapped to <unk>: {dict(tagger.unknown_tags)}")
        return {"pos_tag_ids": tag_ids}


__all__ = ["SourceTagEncoding", "SourceTagsPipelineMixin"]
