"""One data collator for every model family: pads `input_ids`/`labels` and the per-token extra inputs.

`DataCollatorForSeq2Seq` pads only the tokenizer's `model_input_names` and `labels`; a feature such as
`reorder_positions` makes it fail ("Unable to create tensor"). `ExtraInputsDataCollator` takes the extra keys
listed in `xlpe.models.extra_inputs.EXTRA_INPUTS` out of the features, lets the stock collator do its job, then pads
each extra key to the padded length of the side it is aligned with (source → `input_ids`, target → `labels`),
on the tokenizer's padding side, with the key's pad rule. Length mismatches are reported with the example
index instead of producing a ragged tensor; so is an extra key present in some examples but not in others, or
None in one (every example is read, not only the first).

`XLPEDataCollator`, the old name of `ExtraInputsDataCollator`, still imports (with a DeprecationWarning) for one
release.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DataCollatorForSeq2Seq

from ..models.extra_inputs import EXTRA_INPUTS, ExtraInput, pad_value_row


@dataclass
class ExtraInputsDataCollator(DataCollatorForSeq2Seq):
    """`DataCollatorForSeq2Seq` plus the extra per-token inputs of this package.

    Args (besides the parent's `tokenizer`, `model`, `padding`, `max_length`, `pad_to_multiple_of`,
    `label_pad_token_id`, `return_tensors`):
        pad_values: override the pad value of an extra key, e.g. {"pos_tag_ids": 0}.
    """

    pad_values: dict[str, int] = field(default_factory=dict)

    def _spec(self, key: str) -> ExtraInput:
        spec = EXTRA_INPUTS[key]
        if key in self.pad_values:
            spec = dataclasses.replace(spec, pad=int(self.pad_values[key]))
        return spec

    @staticmethod
    def _extra_keys(features: list[dict[str, Any]]) -> list[str]:
        """The extra keys of the batch, read from every example: a key that some examples have and others lack
        is a ValueError naming it and the first example without it (never silently dropped, never a KeyError), and so
        is a value that is not a sequence (None) in any example."""
        keys = [key for key in EXTRA_INPUTS if any(key in f for f in features)]
        for key in keys:
            missing = next((index for index, f in enumerate(features) if key not in f), None)
            if missing is not None:
                having = next(index for index, f in enumerate(features) if key in f)
                raise ValueError(
                    f"example {missing} has no `{key}` but example {having} has: every example of a "
                    "batch needs the same extra inputs (prepare all splits with the same --features)"
                )
            bad = next((index for index, f in enumerate(features) if not hasattr(f[key], "__len__")), None)
            if bad is not None:  # None (a missing value) or a scalar: one value per token is needed
                raise ValueError(
                    f"example {bad}: `{key}` is {type(features[bad][key]).__name__}, expected a list of one "
                    "integer per token (a prepared dataset with a missing value: prepare it again)"
                )
        return keys

    def __call__(self, features: list[dict[str, Any]], return_tensors=None) -> dict[str, torch.Tensor]:
        extra_keys = self._extra_keys(features)
        extras = {key: [list(f.pop(key)) for f in features] for key in extra_keys}
        reference_lengths = {
            "source": [len(f["input_ids"]) for f in features],
            "target": [len(f["labels"]) for f in features] if "labels" in features[0] else None,
        }
        try:
            batch = super().__call__(features, return_tensors=return_tensors)
        finally:
            for key in extra_keys:
                for feature, values in zip(features, extras[key]):
                    feature[key] = values
        padding_side = getattr(self.tokenizer, "padding_side", "right")
        for key in extra_keys:
            spec = self._spec(key)
            if spec.side == "links":  # a row of its own length: padded to the batch's longest with the pad value
                longest = max(len(values) for values in extras[key])
                batch[key] = torch.tensor(
                    [v + pad_value_row(spec, longest, len(v)) for v in extras[key]], dtype=torch.long
                )
                continue
            lengths = reference_lengths[spec.side]
            if lengths is None:
                raise ValueError(f"`{key}` is aligned with `labels`, but the features have no `labels`")
            target_name = "input_ids" if spec.side == "source" else "labels"
            padded_length = batch[target_name].shape[1]
            rows = []
            for index, (values, length) in enumerate(zip(extras[key], lengths)):
                if len(values) != length:
                    raise ValueError(
                        f"example {index}: `{key}` has {len(values)} values but `{target_name}` has {length} tokens"
                    )
                if padding_side == "right":
                    rows.append(values + pad_value_row(spec, padded_length, length))
                else:  # left padding: pad slots are 0..pad-1, real tokens shift right
                    shift = padded_length - length
                    if spec.pad == "identity":
                        rows.append(list(range(shift)) + [v + shift for v in values])
                    else:
                        rows.append(pad_value_row(spec, shift, 0) + values)
            batch[key] = torch.tensor(rows, dtype=torch.long)
        return batch


def __getattr__(name: str):
    """`XLPEDataCollator`: the old name of `ExtraInputsDataCollator`, importable for one release (it warns)."""
    if name == "XLPEDataCollator":
        warnings.warn(
            "XLPEDataCollator was renamed ExtraInputsDataCollator (it serves every family); the old name goes away "
            "in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return ExtraInputsDataCollator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
