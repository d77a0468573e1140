"""Per-token extra inputs (next to `input_ids`/`labels`): what they are, how they pad, how they are checked.

Every model family in this package takes one or more integer tensors aligned token-by-token with the
source (`input_ids`) or the target (`labels`). This module is the single place that knows, for each of them,

* which side it is aligned with ("source" → same length as `input_ids`, "target" → as `labels`);
* how it is padded by the collator: with a constant, or with "identity" (a padded slot i gets value i, so a
  padded row of `reorder_positions` is still a permutation of 0..T-1);
* how it is validated inside `forward` (shape, dtype, range) with a ValueError that names the argument and
  says what was expected and what was given. No IndexError from an embedding lookup, no device assert.

The table itself (`EXTRA_INPUTS`: name, side, pad rule, oracle, `generate`) is `extra_input_specs.py`, which has
no imports so that the registry and the CLI read it without torch; it is re-exported here under its old names.
To add a new per-token input: add an `ExtraInput` there; the collator, the pipeline and the validation pick it
up (see CONTRIBUTING.md).
"""

from __future__ import annotations

import torch

from .extra_input_specs import EXTRA_INPUTS, IGNORE_INDEX, ExtraInput, pad_value_row  # noqa: F401  (the table)
from .tag_sets import PAD_TAG_ID, SPECIAL_TAG_NAMES

# ---------------------------------------------------------------------------------------------------------
# Validation helpers (called from the models' forward; vectorised, one host sync per check)
# ---------------------------------------------------------------------------------------------------------
# The value checks below read tensor contents on the host. Under `torch.compile` they are skipped (a host sync
# would break the graph at every forward): compiled code is validated by the same call in eager mode, or by
# the collator; shape and dtype checks, which need no data, always run.


def check_integer_tensor(name: str, value: torch.Tensor, expected_shape: tuple[int, ...]) -> None:
    """Raise ValueError unless `value` is an integer tensor of `expected_shape`."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"`{name}` must be a torch.LongTensor of shape {tuple(expected_shape)}, got {type(value).__name__}"
        )
    if value.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"`{name}` must be an integer tensor (torch.long), got dtype {value.dtype}")
    if tuple(value.shape) != tuple(expected_shape):
        raise ValueError(
            f"`{name}` must have shape {tuple(expected_shape)} (batch, sequence length of the tokens it annotates), "
            f"got {tuple(value.shape)}"
        )


def token_mask(attention_mask: torch.Tensor | None, shape: tuple[int, int], device) -> torch.Tensor:
    """Boolean [batch, len] mask of real (non-pad) tokens; all True when no attention mask is given."""
    if attention_mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    return attention_mask.to(torch.bool)


def check_permutation(name: str, positions: torch.Tensor, mask: torch.Tensor) -> None:
    """Each row's values on real tokens must be a permutation of that row's real-token indices.

    With right padding (Marian's) that is a permutation of 0..n-1; pad slots may hold anything.
    """
    if torch.compiler.is_compiling():
        return
    batch, length = positions.shape
    real = mask & (positions >= 0) & (positions < length)
    out_of_range = mask & ~real
    index = torch.arange(length, device=positions.device).expand(batch, length)
    expected = index.masked_fill(~mask, length).sort(dim=1).values
    actual = positions.masked_fill(~mask, length).sort(dim=1).values
    bad_rows = (expected != actual).any(dim=1)
    if not bool(out_of_range.any() | bad_rows.any()):  # the one host sync of the valid (common) case
        return
    if bool(out_of_range.any()):
        row, col = (int(i) for i in out_of_range.nonzero()[0])
        raise ValueError(
            f"`{name}` values must lie in [0, {length}) on non-pad tokens; row {row}, token {col} has "
            f"{int(positions[row, col])}"
        )
    if bool(bad_rows.any()):
        row = int(bad_rows.nonzero()[0, 0])
        n = int(mask[row].sum())
        raise ValueError(
            f"`{name}` row {row} is not a permutation of its {n} non-pad positions: expected each of "
            f"{index[row][mask[row]].tolist()[:20]}{'...' if n > 20 else ''} exactly once, got "
            f"{positions[row][mask[row]].tolist()[:20]}{'...' if n > 20 else ''}"
        )


def check_range(
    name: str, values: torch.Tensor, mask: torch.Tensor, low: int, high: int, allowed: int | None = None
) -> None:
    """Values on real tokens must lie in [low, high) (or equal `allowed`, e.g. -100)."""
    if torch.compiler.is_compiling():
        return
    ok = (values >= low) & (values < high)
    if allowed is not None:
        ok |= values == allowed
    bad = mask & ~ok
    if bool(bad.any()):
        row, col = (int(i) for i in bad.nonzero()[0])
        extra = f" or {allowed}" if allowed is not None else ""
        raise ValueError(
            f"`{name}` values must lie in [{low}, {high}){extra}; row {row}, token {col} has {int(values[row, col])}"
        )


def checked_tag_ids(name: str, tag_ids, shape, mask: torch.Tensor | None, num_tag_ids: int, check: bool):
    """Validate (shape, id range on real tokens; -100 allowed) and return ids with pad slots set to <pad>."""
    if check:
        check_integer_tensor(name, tag_ids, shape)
        real = mask if mask is not None else torch.ones(shape, dtype=torch.bool, device=tag_ids.device)
        check_range(name, tag_ids, real, 0, num_tag_ids, allowed=IGNORE_INDEX)
    tag_ids = tag_ids.long()
    if mask is not None:
        tag_ids = tag_ids.masked_fill(~mask, PAD_TAG_ID)
    return tag_ids.masked_fill(tag_ids == IGNORE_INDEX, PAD_TAG_ID)


# ---------------------------------------------------------------------------------------------------------
# The standard inputs (input_ids, attention_mask, labels, decoder ids): checked once per encoder / decoder call
# ---------------------------------------------------------------------------------------------------------
# Stock Marian/BART fail on these with an IndexError from an embedding lookup (a device-side assert on CUDA) or a
# reshape error deep inside attention. Shape checks need no data and always run; value checks need one host sync
# per call and run in eager mode when `config.check_inputs` (default True), skipped under torch.compile.


def _first_bad(bad: torch.Tensor) -> tuple[int, int]:
    row, col = (int(i) for i in bad.nonzero()[0])
    return row, col


def check_source_inputs(config, input_ids=None, attention_mask=None, inputs_embeds=None) -> None:
    """The encoder's inputs: non-empty 2-D ids (or embeddings), a mask of the same shape, right padding, ids in
    the vocabulary. Raises ValueError naming the argument, what was expected and what was given."""
    name, given = ("input_ids", input_ids) if input_ids is not None else ("inputs_embeds", inputs_embeds)
    if given is None:
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    shape = tuple(given.shape[:2]) if name == "inputs_embeds" else tuple(given.shape)
    if given.dim() != (3 if name == "inputs_embeds" else 2):
        raise ValueError(
            f"`{name}` must be {'3' if name == 'inputs_embeds' else '2'}-D (batch, length"
            f"{', d_model' if name == 'inputs_embeds' else ''}), got shape {tuple(given.shape)}"
        )
    if 0 in shape:
        raise ValueError(
            f"`{name}` is empty (shape {tuple(given.shape)}): every input needs at least one token (the tokenizer "
            "encodes an empty line as its EOS token alone)"
        )
    if attention_mask is not None and tuple(attention_mask.shape) != shape:
        raise ValueError(f"`attention_mask` must have the shape of `{name}` {shape}, got {tuple(attention_mask.shape)}")
    if torch.compiler.is_compiling() or not getattr(config, "check_inputs", True):
        return
    vocab_size = config.vocab_size
    bad_ids = (input_ids < 0) | (input_ids >= vocab_size) if input_ids is not None else None
    # left padding: a row whose first slot is padding although it has real tokens (positions count from slot 0);
    # an empty row: every token masked (attention over nothing gives NaN)
    real = attention_mask != 0 if attention_mask is not None else None
    left_padded = ~real[:, 0] & real.any(dim=1) if real is not None else None
    empty_rows = ~real.any(dim=1) if real is not None else None
    flags = [flag.any() for flag in (bad_ids, left_padded, empty_rows) if flag is not None]
    if not flags or not bool(torch.stack(flags).any()):  # the one host sync of the valid (common) case
        return
    if bad_ids is not None and bool(bad_ids.any()):
        row, col = _first_bad(bad_ids)
        raise ValueError(
            f"`input_ids` must be token ids in [0, vocab_size={vocab_size}); row {row}, token {col} has "
            f"{int(input_ids[row, col])} (a tokenizer other than the model's?)"
        )
    if bool(empty_rows.any()):
        row = int(empty_rows.nonzero()[0, 0])
        raise ValueError(f"`attention_mask` row {row} masks every token: each input needs at least one real token")
    row = int(left_padded.nonzero()[0, 0])
    raise ValueError(
        f"`attention_mask` row {row} starts with padding: these models take right-padded inputs (Marian's and BART's "
        "tokenizers pad on the right; set tokenizer.padding_side = 'right'), as their positions count from the "
        "first slot and a left-padded sentence would be encoded at shifted positions"
    )


def check_target_inputs(config, decoder_input_ids=None, labels=None, past_length: int | None = 0) -> None:
    """The decoder's inputs: `labels` / `decoder_input_ids` within `max_position_embeddings` (counting the
    `past_length` tokens already in the KV cache, when it is a plain int) and within the target vocabulary."""
    limit = config.max_position_embeddings
    if labels is not None and labels.dim() == 2 and labels.shape[1] > limit:
        raise ValueError(
            f"`labels` have {labels.shape[1]} tokens, more than max_position_embeddings={limit}: truncate the "
            "targets (e.g. --max_target_length)"
        )
    if (
        decoder_input_ids is not None
        and isinstance(past_length, int)
        and past_length + decoder_input_ids.shape[-1] > limit
    ):
        end = past_length + decoder_input_ids.shape[-1]
        raise ValueError(
            f"decoder position {end} exceeds max_position_embeddings={limit}: the model has no position beyond it; "
            f"generate at most {limit} tokens (max_new_tokens / max_length)"
        )
    if torch.compiler.is_compiling() or not getattr(config, "check_inputs", True):
        return
    shared = getattr(config, "share_encoder_decoder_embeddings", True)  # BART always shares
    vocab_size = config.vocab_size if shared else config.decoder_vocab_size
    checked = []
    if labels is not None:
        checked.append(("labels", labels, ((labels < 0) | (labels >= vocab_size)) & (labels != IGNORE_INDEX)))
    if decoder_input_ids is not None and not past_length:  # decoding steps feed back the model's own ids
        ids = decoder_input_ids
        checked.append(("decoder_input_ids", ids, (ids < 0) | (ids >= vocab_size)))
    if not checked or not bool(torch.stack([bad.any() for _, _, bad in checked]).any()):  # one host sync
        return
    for name, values, bad in checked:
        if bool(bad.any()):
            row, col = _first_bad(bad)
            allowed = f" or {IGNORE_INDEX}" if name == "labels" else ""
            raise ValueError(
                f"`{name}` must be token ids in [0, {vocab_size}){allowed}; row {row}, token {col} has "
                f"{int(values[row, col])}"
            )


# ---------------------------------------------------------------------------------------------------------
# Valid example values (tests, benches: any family's inputs from its `ExtraInput.example` kinds)
# ---------------------------------------------------------------------------------------------------------


def num_tag_ids(config, side: str) -> int:
    """Tag ids of `config` on `side` ("source"/"target"): mvPE+POS's per side, a source tagger's otherwise."""
    if hasattr(config, "num_tag_ids"):
        return config.num_tag_ids("encoder" if side == "source" else "decoder")
    if side == "source" and hasattr(config, "num_source_tag_ids"):
        return config.num_source_tag_ids()
    return 0


def example_extra_inputs(
    config,
    names,
    input_ids: torch.Tensor,
    decoder_input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    decoder_attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> dict:
    """Valid values of the extra inputs `names` that a model of `config` reads (`config.uses_extra_input`) for a
    batch of right-padded `input_ids` / `decoder_input_ids` (target-side inputs only when those are given), each
    made from its `ExtraInput.example` kind over a row's n real tokens: a permutation reverses the first n - 1
    and keeps the last (EOS) and the padding in place; a rank is the reversed order of the first n - 1, the rest
    unsupervised; a tag is a random ordinary tag of the side, the padding tag on padding; an index is the
    token's index, the input's pad value on padding."""
    values = {}
    for name in names:
        spec = EXTRA_INPUTS[name]
        if hasattr(config, "uses_extra_input") and not config.uses_extra_input(name):
            continue
        ids, mask = (
            (input_ids, attention_mask) if spec.side == "source" else (decoder_input_ids, decoder_attention_mask)
        )
        if ids is None:
            continue
        rows, length = ids.shape
        mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        index = torch.arange(length, device=ids.device).expand(rows, length)
        last = mask.sum(dim=1, keepdim=True) - 1  # the row's last real token (EOS)
        reversed_index = last - 1 - index
        if spec.example == "permutation":
            values[name] = torch.where(index < last, reversed_index, index)
        elif spec.example == "rank":
            values[name] = torch.where(index < last, reversed_index, torch.full_like(index, IGNORE_INDEX))
        elif spec.example == "tag":
            tags, first = num_tag_ids(config, spec.side), len(SPECIAL_TAG_NAMES)
            if tags <= first:
                raise ValueError(f"{name}: the config has no tags on the {spec.side} side to make an example from")
            tag_ids = torch.randint(first, tags, (rows, length), generator=generator).to(ids.device)
            values[name] = torch.where(mask, tag_ids, torch.full_like(tag_ids, PAD_TAG_ID))
        elif spec.example == "index":  # padding: the input's pad value ("identity": the index itself)
            values[name] = (
                index if spec.pad == "identity" else torch.where(mask, index, torch.full_like(index, spec.pad))
            )
        else:
            raise ValueError(f"{name}: example must be one of permutation, rank, tag, index; got {spec.example!r}")
    return values
