"""A translation pipeline for every model family of this package (transformers 5 removed the core one).

Raw text in, `[{"translation_text": ...}]` out. The model supplies whatever extra inputs it needs from the
source alone: XL PE predicts its reorderings inside the encoder; a model with a `prepare_pipeline_inputs`
method (mvPE+POS tags the text) is asked for its extra per-token inputs here.

Three ways to get one:
* in memory: `XLPETranslationPipeline(model=model, tokenizer=tokenizer)`, or `pipeline("xlpe-translation", ...)`
  once `xlpe` is imported;
* from a saved directory (this file is copied there by `save_pretrained`):
  `pipeline("translation", model=dir, trust_remote_code=True)`, also where `xlpe` is not installed.

This file imports only transformers and torch: it travels as Hub custom code.
"""

from __future__ import annotations

from transformers import Pipeline
from transformers.utils import logging

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
    `max_position_embeddings`, not the tokenizer's `model_max_length`, which may be smaller; an input the model can
    take is always translated in full):
      * None (default): such an input is cut to the limit, with a warning naming its length and the limit;
      * True: cut to the limit without a warning (the caller reports it: `xlpe-translate` counts and lists them);
      * False: never cut (the model then fails on the input).
    When neither `max_new_tokens` nor `max_length` is given, the output may be up to 1.5 x source + 10 tokens
    (at most the model's limit).
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, truncation=None, clean_up_tokenization_spaces=None, **generate_kwargs):
        preprocess_params = {"truncation": truncation}
        postprocess_params = {}
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
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
        limit = getattr(self.model.config, "max_position_embeddings", None)
        return int(limit) if limit else int(self.tokenizer.model_max_length)

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
        if "max_new_tokens" not in generate_kwargs and "max_length" not in generate_kwargs:
            source_length = int(model_inputs["input_ids"].shape[1])
            generate_kwargs["max_new_tokens"] = min(int(1.5 * source_length) + 10, self.source_limit())
        return {"output_ids": self.model.generate(**model_inputs, **generate_kwargs)}

    def postprocess(self, model_outputs, clean_up_tokenization_spaces=False):
        return [
            {
                "translation_text": self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
            }
            for ids in model_outputs["output_ids"]
        ]
