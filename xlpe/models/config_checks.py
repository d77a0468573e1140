"""Config validation that runs on every construction path of every family's config.

A transformers config can be built three ways, and only the first one runs the config's `__post_init__` with
the values the user gave:

1. `Config(**fields)` (and `from_dict`, which the loading of a saved `config.json` goes through);
2. `from_pretrained(directory, field=value)` (also `Model.from_pretrained(directory, field=value)` and the
   stock-checkpoint upgrade of `hub_support.py`): transformers builds the config from the saved dict, then
   *assigns* the keyword values, so a bogus value passes unchecked, is saved, and the saved model no longer
   loads;
3. attribute assignment (`config.xl_heads = 99`), before a model is built from it.

`ValidatedConfigMixin` (first in a family config's bases) closes 2: the family's own fields given as keyword
arguments are merged into the dict *before* the config is built, so derived defaults see them (e.g.
`xl_heads` for the given `xl_strategy`), and every check runs again after the assignment of the remaining
keywords. Each family puts its checks in `validate_family_fields` (a `validate_*` method: also run by
transformers' `config.validate()`, which `save_pretrained` calls); the models call `config.validate()` when
they are built, which closes 3. Every float-valued field must also be finite: a NaN or infinite dropout,
step or weight otherwise turns every output into NaN without an error. The layout fields every family shares
with its stock base (`LAYOUT_FIELDS`: vocabulary, width, layers, heads, feed-forward widths, position limit) are
checked from one table, with each width divisible by its heads (`check_layout_fields`, which takes any config or
config dict, a stock one too): a `max_position_embeddings` of 0 otherwise fails on the first sentence with an
IndexError.

Flat file, imports only transformers: it travels as Hub custom code next to the configuration files.
"""

from __future__ import annotations

import inspect
import math


def check_finite_fields(config) -> None:
    """Raise ValueError naming the first float-valued field of `config` that is NaN or infinite."""
    for name in getattr(config, "__dataclass_fields__", {}):
        value = getattr(config, name, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")


def check_choice(name: str, value, choices: tuple) -> None:
    """Raise ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_number(
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    integer: bool = False,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raise ValueError unless `value` is a (finite; integer if asked) number within [low, high] (or open ends)."""
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value)
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high if high_inclusive else value < high
    if not ok:
        lo = "" if low is None else f"{'>=' if low_inclusive else '>'} {low}"
        hi = "" if high is None else f"{'<=' if high_inclusive else '<'} {high}"
        bounds = " and ".join(part for part in (lo, hi) if part)
        raise ValueError(f"{name} must be {kind}{' ' + bounds if bounds else ''}, got {value!r}")


# (field, smallest value): integers; an encoder-free model (encoder_layers=0) is the paper's Table 4
LAYOUT_FIELDS = (
    ("vocab_size", 1),
    ("d_model", 1),
    ("encoder_layers", 0),
    ("decoder_layers", 1),
    ("encoder_attention_heads", 1),
    ("decoder_attention_heads", 1),
    ("encoder_ffn_dim", 1),
    ("decoder_ffn_dim", 1),
    ("max_position_embeddings", 1),
)
# (width, heads): the heads split the width evenly
DIVISIBLE_FIELDS = (("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads"))


def check_layout_fields(config) -> None:
    """Raise ValueError naming the first `LAYOUT_FIELDS` field of `config` (a config or its dict) that is not an
    integer at least its smallest value, or the first width of `DIVISIBLE_FIELDS` its heads do not divide. A
    field the config does not have is not checked."""

    def value_of(name):
        return config.get(name) if isinstance(config, dict) else getattr(config, name, None)

    for name, low in LAYOUT_FIELDS:
        if value_of(name) is not None:
            check_number(name, value_of(name), low, integer=True)
    for width, heads in DIVISIBLE_FIELDS:
        if value_of(width) is not None and value_of(heads) and value_of(width) % value_of(heads):
            raise ValueError(
                f"{width} must be divisible by {heads}, got {width}={value_of(width)} and {heads}={value_of(heads)} "
                f"(each head is {width} / {heads} wide)"
            )


class ValidatedConfigMixin:
    """First in a family config's bases. The family defines `validate_family_fields(self)` (raises ValueError)."""

    def validate_family_fields(self) -> None:  # overridden by each family
        pass

    def validate_finite_fields(self) -> None:
        check_finite_fields(self)

    def validate_layout_fields(self) -> None:
        check_layout_fields(self)

    def validate(self) -> None:
        """transformers' checks (also run by `save_pretrained`), then the layout table, the family's and the
        finiteness check."""
        super().validate()
        self.validate_layout_fields()
        self.validate_family_fields()
        self.validate_finite_fields()

    @classmethod
    def family_fields(cls) -> set[str]:
        """Fields declared by the family's classes (its config and its mixins), not by the stock config."""
        names: set[str] = set()
        for klass in cls.__mro__:
            if klass.__module__.startswith("transformers."):
                break
            names |= set(inspect.get_annotations(klass))
        return names

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        own_fields = cls.family_fields()
        merged = dict(config_dict)
        for name in [key for key in kwargs if key in own_fields]:
            merged[name] = kwargs.pop(name)
        result = super().from_dict(merged, **kwargs)
        config = result[0] if isinstance(result, tuple) else result
        config.validate()  # again: keywords for inherited fields were assigned after construction
        return result


__all__ = [
    "DIVISIBLE_FIELDS",
    "LAYOUT_FIELDS",
    "ValidatedConfigMixin",
    "check_choice",
    "check_finite_fields",
    "check_layout_fields",
    "check_number",
]
