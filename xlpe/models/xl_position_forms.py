"""XL PE's position forms: how the tau XL heads see each token's XL position (its index in the reordered sentence).

* "absolute" (the paper, Eq. 9): X + PE_XL enters the XL heads' Q/K/V in the first layer: HeadXL's own projection
  (modeling_xlpe.py, `XLHeadAttention`); no module here.
* "relative": Shaw et al.'s distances (Eq. 4-5) between XL positions instead of source indices: an additive score
  bias (keys) and a value term, both scaled by XL PE's gate g.
* "rotary": RoPE angles (Su et al., Eq. 34) of g * XL position instead of the source index.
* "alibi": ALiBi's linear bias (Press et al., 2022, Sec. 3) of XL distances, -g m_h |pi(i) - pi(j)|, as a score bias.

A form that lives inside the attention is one `XLPositionForm` module (position_modules.py, built as
`module(config, head_dim)`) and one `XLFormSpec` row here (`register_xl_position_form`): the attention asks its form
for rotation positions and/or a score bias and a value term (`rotates`, `biases`, `value_terms`) and never compares
names; the config validates `xl_position_form` against this table and reads each form's needs from its row, and
`xlpe-train --xl_position_form` lists its names. g = 0 gives the XL heads no XL term: the function-preserving
upgrade of a stock checkpoint.

No imports: the table is read without torch (the CLI's flag choices). Flat file: it travels as Hub custom code.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XLFormSpec:
    name: str  # the value of `xl_position_form`
    doc: str  # one line
    # the XLPositionForm built in each attention with XL heads: a class, or the name of one in position_modules.py
    # (the built-in ones); None: the form is HeadXL's input projection
    module: type | str | None = None
    attribute: str = "xl_form"  # the attention's submodule it lives under (its weights' names)
    even_head_dim: bool = False  # rotates pairs of a head's dimensions: d_model / heads must be even

    @property
    def in_attention(self) -> bool:
        """Does the form live in the attention (relative/rotary: any layer may have XL heads), or is it the XL
        heads' input projection (absolute: the first layer's HeadXL)?"""
        return self.module is not None


XL_POSITION_FORMS: dict[str, XLFormSpec] = {}


def register_xl_position_form(spec: XLFormSpec) -> XLFormSpec:
    """Add a form: `xl_position_form` accepts it, and attentions with XL heads build `spec.module`."""
    existing = XL_POSITION_FORMS.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"XL position form {spec.name!r} is already registered as {existing}")
    if spec.module is not None and not isinstance(spec.module, str) and not hasattr(spec.module, "rotation_positions"):
        raise ValueError(f"XL position form {spec.name!r}: module must be an XLPositionForm, got {spec.module!r}")
    XL_POSITION_FORMS[spec.name] = spec
    return spec


def attention_form_names() -> list[str]:
    """The registered forms that live in the attention (any layer's XL heads), sorted: what error messages list."""
    return sorted(name for name, spec in XL_POSITION_FORMS.items() if spec.in_attention)


def unregister_xl_position_form(name: str) -> XLFormSpec | None:
    if name in BUILTIN_XL_POSITION_FORMS:
        raise ValueError(f"{name!r} is a built-in XL position form")
    return XL_POSITION_FORMS.pop(name, None)


def xl_position_form(name: str) -> XLFormSpec:
    if name not in XL_POSITION_FORMS:
        raise ValueError(f"xl_position_form must be one of {sorted(XL_POSITION_FORMS)}, got {name!r}")
    return XL_POSITION_FORMS[name]


BUILTIN_XL_POSITION_FORMS = ("absolute", "relative", "rotary", "alibi")
for _spec in (
    XLFormSpec("absolute", "X + PE_XL into the XL heads' Q/K/V in the first layer (Eq. 9, HeadXL)"),
    XLFormSpec("relative", "Shaw distances of XL positions, times g", "XLRelativeForm", attribute="xl_relative"),
    XLFormSpec("rotary", "RoPE angles of g * XL position", "XLRotaryForm", attribute="xl_rotary", even_head_dim=True),
    XLFormSpec("alibi", "ALiBi bias -g m_h |pi(i) - pi(j)| of XL positions", "XLALiBiForm", attribute="xl_alibi"),
):
    register_xl_position_form(_spec)
del _spec


__all__ = [
    "BUILTIN_XL_POSITION_FORMS",
    "XL_POSITION_FORMS",
    "XLFormSpec",
    "attention_form_names",
    "register_xl_position_form",
    "unregister_xl_position_form",
    "xl_position_form",
]
