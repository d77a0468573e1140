"""The per-token extra inputs (next to `input_ids` / `labels`) as a table: name, side, pad rule, whether it is an
oracle and whether `generate` takes it. No imports: this file travels as Hub custom code (the collator and the
input checks in `extra_inputs.py` read it), and `registry.py` reads it without torch (the CLI's `--features`
choices, the feature preparation, `xlpe-train`'s list of what a model reads).

For each input:
* `side`: "source" (same length as `input_ids`), "target" (as `labels`) or "links" (a flat list of
  (target token, source token) pairs of its own length, padded to the batch's longest);
* `pad`: how the collator pads it: a constant, or "identity" (a padded slot i gets value i, so a padded row of
  `reorder_positions` is still a permutation of 0..T-1);
* `oracle`: a gold training signal read off the references (word alignments) and predicted by the model at
  test time: `generate` sees it only when asked for explicitly (an oracle evaluation);
* `generate`: whether `generate()` accepts it (a source-side input a test-time tool produces, or an oracle);
* `example`: what a valid value looks like, so tests and benches make one for any family
  (`extra_inputs.example_extra_inputs`): "permutation" (of the row's positions), "rank" (a target rank per
  token, IGNORE_INDEX allowed), "tag" (a tag id of the config's tag set of that side) or "index" (any
  non-negative integer, e.g. the token's index).

To add one: an `ExtraInput` row below, or `xlpe.models.registry.register_extra_input` (CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import dataclass

IGNORE_INDEX = -100  # "no supervision" marker, as in `labels`


@dataclass(frozen=True)
class ExtraInput:
    name: str
    side: str  # "source" (aligned with input_ids), "target" (aligned with labels) or "links" (own length)
    pad: int | str  # constant pad value, or "identity" (pad slot i gets value i)
    doc: str
    oracle: bool = False  # gold at training time, predicted at test time
    generate: bool = True  # `generate()` accepts it (an oracle only when asked for)
    example: str = "index"  # a valid value's kind: "permutation", "rank", "tag" or "index" (module doc)


EXTRA_INPUTS: dict[str, ExtraInput] = {
    spec.name: spec
    for spec in (
        ExtraInput(
            "reorder_positions",
            "source",
            "identity",
            "XL position of each source token (XL PE Fig. 1b)",
            oracle=True,
            example="permutation",
        ),
        ExtraInput(
            "target_positions",
            "source",
            IGNORE_INDEX,
            "target rank of each source token (DPE Eq. 1)",
            oracle=True,
            example="rank",
        ),
        ExtraInput("pos_tag_ids", "source", 0, "POS tag id of each source token (mvPE+POS Eq. 11)", example="tag"),
        ExtraInput(
            "decoder_pos_tag_ids",
            "target",
            0,
            "POS tag id of each target token (mvPE+POS Eq. 11)",
            generate=False,
            example="tag",
        ),
        ExtraInput(
            "alignment_links",
            "links",
            IGNORE_INDEX,
            "(target, source) sub-word links of the word alignment (guided alignment, Garg et al. 2019 Sec. 4)",
            generate=False,
        ),
    )
}


def pad_value_row(spec: ExtraInput, length: int, start: int) -> list[int]:
    """Values for padding slots start..length-1 of one row."""
    if spec.pad == "identity":
        return list(range(start, length))
    return [int(spec.pad)] * (length - start)


EXAMPLE_KINDS = ("permutation", "rank", "tag", "index")

__all__ = ["EXAMPLE_KINDS", "EXTRA_INPUTS", "IGNORE_INDEX", "ExtraInput", "pad_value_row"]
