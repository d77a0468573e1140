"""The strategies of the model families: a family's named variants of where its position signal enters (XL PE's
`xl_strategy`: none / in / head / combination), each with the traits its config and model read.

One table and no imports: this file travels as Hub custom code with the configuration files (the config validates
its strategy field against the table), and `registry.py` reads it without torch or transformers (the CLI lists the
choices from it). To add a strategy: one `Strategy(...)` row below, or `add_strategy` from a plugin
(CONTRIBUTING.md, "Adding a strategy / PE variant").
"""

from __future__ import annotations

from dataclasses import dataclass

# The traits XL PE's config and model read (a strategy is the set of them it switches on):
INPUT_FUSION = "input"  # InXL: the input carries tanh(PE_abs U + PE_XL V) (Eq. 7-8)
XL_HEADS = "heads"  # HeadXL: tau first-layer heads read X + PE_XL (Eq. 9-11)


@dataclass(frozen=True)
class Strategy:
    name: str  # the value of the family's strategy field, e.g. xl_strategy="head"
    family: str  # the registry name of the family whose config selects it, e.g. "xlpe"
    doc: str  # one line: what it is (CLI help, docs)
    traits: frozenset = frozenset()  # what it switches on (INPUT_FUSION, XL_HEADS, ...)


STRATEGIES: dict[str, dict[str, Strategy]] = {}  # family -> strategy name -> Strategy, in registration order


def add_strategy(strategy: Strategy) -> Strategy:
    """Add `strategy` to its family's table (the same row again is a no-op; another row of that name an error)."""
    table = STRATEGIES.setdefault(strategy.family, {})
    existing = table.get(strategy.name)
    if existing is not None and existing != strategy:
        raise ValueError(f"strategy {strategy.name!r} of family {strategy.family!r} is already registered")
    table[strategy.name] = strategy
    return strategy


def remove_strategy(family: str, name: str) -> None:
    STRATEGIES.get(family, {}).pop(name, None)


def strategy_names(family: str) -> tuple[str, ...]:
    """The strategy names of `family`, in registration order (the config's choices)."""
    return tuple(STRATEGIES.get(family, {}))


def strategy_traits(family: str, name: str) -> frozenset:
    """The traits of strategy `name` of `family` (empty for an unknown name: the config's check names it)."""
    strategy = STRATEGIES.get(family, {}).get(name)
    return strategy.traits if strategy is not None else frozenset()


for _strategy in (
    Strategy("none", "xlpe", "no XL signal: a vanilla Transformer through the same code path (baseline)"),
    Strategy("in", "xlpe", "InXL: the input is X + tanh(PE_abs U + PE_XL V) (Eq. 7-8)", frozenset({INPUT_FUSION})),
    Strategy("head", "xlpe", "HeadXL: tau first-layer heads read X + PE_XL (Eq. 9-11)", frozenset({XL_HEADS})),
    Strategy(
        "combination",
        "xlpe",
        "HeadXL with the InXL fusion in place of PE_XL (footnote 2)",
        frozenset({INPUT_FUSION, XL_HEADS}),
    ),
):
    add_strategy(_strategy)
del _strategy

__all__ = [
    "INPUT_FUSION",
    "STRATEGIES",
    "XL_HEADS",
    "Strategy",
    "add_strategy",
    "remove_strategy",
    "strategy_names",
    "strategy_traits",
]
