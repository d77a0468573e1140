"""A translation pipeline for every model family of this package (transformers 5 removed the core one).

Raw text in, `[{"translation_text": ...}]` out. The model supplies whatever extra inputs it needs from the
source alone: XL PE predicts its reorderings inside the encoder; a model with a `prepare_pipeline_inputs`
method (mvPE+POS tags the text) is asked for its extra per-token inputs here.

Three ways to get one:
* in memory: `XLPETranslationPipeline(model=model, tokenizer=tokenizer)`, or `pipeline("xlpe-translation", ...)`
  once `xlpe` is imported;
* from a saved directory (this file is copied there by `save_pretrained`):
  `pipeline("translation", model=dir, trust_remote_code=True)`, also where `xlpe` is not installed. transformers 5
  has no "translation" task of its own: the name works through config.json's `custom_pipelines` entry. A stock
  model's folder (MarianMT, BART, OPUS-MT) gets this file and the entry from
  `hub_support.add_translation_pipeline(dir)` (`xlpe-train` calls it), or a copy from
  `python -m xlpe.cli.add_pipeline SOURCE DESTINATION`.

This file imports only transformers and torch: it travels as Hub custom code.
"""

from __future__ import annotations

from transformers import Pipeline
from transformers.utils import logging

from .length_rule import (
    RULE_TEXT,
    align_tokenizer_limit,
    generated_lengths,
    length_rule_generate_kwargs,
    position_limit,
    reached_limit,
)

logger = logging.get_logger(__name__)

TRANSLATION_PIPELINE_ENTRY = {
    "impl": "pipeline_translation.XLPETranslationPipeline",
    "pt": ["AutoModelForSeq2SeqLM"],
    "tf": [],
    "type": "text",
}


class XLPETranslationPipeline(Pipeline):
    """Translate raw text with an xlpe model (beam search by default as configured in its generation config).

    Call arguments: `num_beams`, `max_new_tokens`/`max_length` and any other `generate` argument; `batch_size`
    (pipeline batching); `truncation` for inputs longer than the model can encode (`source_limit()`: the model's
    `max_position_embeddings`; the tokenizer's `model_max_length` is set to it when they differ, so an input the
    model can take is always translated in full):
      * None (default): such an input is cut to the limit, with a warning naming its length and the limit;
      * True: cut to the limit without a warning (the caller reports it: `xlpe-translate` counts and lists them);
      * False: never cut (the model then fails on the input).
    The length rule (`xlpe/models/length_rule.py`): when neither `max_new_tokens` nor `max_length` is given, each
    sentence's translation has at most min(floor(1.5 x its own source tokens) + 10, max_position_embeddings - 1)
    new tokens, whatever it is batched with; an explicit `max_new_tokens`/`max_length` caps every sentence alike.
    A translation that reached its budget or cap (ended by the rule, not by the model) is reported: a warning,
    or with `return_limits=True` a field `output_at_limit` in its result (the caller counts them).
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tokenizer is not None and getattr(self.model.config, "max_position_embeddings", None):
            align_tokenizer_limit(self.tokenizer, self.source_limit())

    def _sanitize_parameters(
        self, truncation=None, clean_up_tokenization_spaces=None, return_limits=None, **generate_kwargs
    ):
        preprocess_params = {"truncation": truncation}
        postprocess_params = {}
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        if return_limits is not None:
            postprocess_params["return_limits"] = bool(return_limits)
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, inputs, **kwargs):
        if isinstance(inputs, str):
            return super().__call__(inputs, **kwargs)
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(text, str) for text in inputs):
            raise ValueError(f"inputs must be a string or a list of strings, got {type(inputs).__name__}")
        return [result[0] for result in super().__call__(list(inputs), **kwargs)]

    def source_limit(self) -> int:
        """The longest input in tokens (special tokens included) the model can encode: its position table
        (`config.max_position_embeddings`), or the tokenizer's `model_max_length` for a model without one."""
        return position_limit(self.model.config, self.tokenizer)

    def preprocess(self, text, truncation=None):
        if not isinstance(text, str):
            raise ValueError(f"each input must be a string, got {type(text).__name__}")
        if truncation is False:
            inputs = self.tokenizer(text, return_tensors="pt", truncation=False)
        else:
            limit = self.source_limit()
            inputs = self.tokenizer(text, return_tensors="pt", truncation=True, max_length=limit)
            if truncation is None and inputs["input_ids"].shape[1] >= limit:  # at the limit: was it cut?
                full = len(self.tokenizer(text, truncation=False, verbose=False)["input_ids"])
                if full > limit:
                    logger.warning(
                        "an input of %d tokens is longer than the model's limit of %d (max_position_embeddings): "
                        "translated from its first %d tokens",
                        full,
                        limit,
                        limit,
                    )
        prepare = getattr(self.model, "prepare_pipeline_inputs", None)
        if prepare is not None:
            inputs.update(prepare([text], self.tokenizer, inputs))
        return dict(inputs)

    def _forward(self, model_inputs, **generate_kwargs):
        config = self.model.generation_config
        if generate_kwargs.get("use_cache", config.use_cache) is False and not getattr(self, "_said_no_cache", False):
            self._said_no_cache = True  # once per pipeline
            logger.warning(
                "this model decodes without the key/value cache (use_cache false in its generation_config.json, or "
                "the call's use_cache=False): each step recomputes the whole prefix, many times slower on long "
                "sentences; set generation_config.use_cache = True (xlpe-train saves it so)"
            )
        eos = config.eos_token_id if config.eos_token_id is not None else self.tokenizer.eos_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        generate_kwargs, budgets = length_rule_generate_kwargs(
            model_inputs["attention_mask"], self.source_limit(), eos, generate_kwargs
        )
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        pad = config.pad_token_id if config.pad_token_id is not None else self.tokenizer.pad_token_id
        lengths = generated_lengths(output_ids, eos, pad)
        return {"output_ids": output_ids, "at_limit": reached_limit(lengths, budgets), "budget": budgets}

    def postprocess(self, model_outputs, clean_up_tokenization_spaces=False, return_limits=False):
        results = []
        for ids, at_limit, budget in zip(
            model_outputs["output_ids"], model_outputs["at_limit"], model_outputs["budget"]
        ):
            result = {
                "translation_text": self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            }
            if return_limits:
                result["output_at_limit"] = bool(at_limit)
            elif at_limit:
                logger.warning(
                    "a translation reached its length limit of %d new tokens (%s, or the explicit "
                    "max_new_tokens/max_length) before ending: it may be cut short",
                    int(budget),
                    RULE_TEXT,
                )
            results.append(result)
        return results
