"""The tiny registry of model families: name -> (config class, base model class, generation model class).

`xlpe-train --model_type NAME` and the benchmarks look families up here; `xlpe/__init__.py` registers each
family with the transformers Auto classes from this table. Adding a family is one `register_family` call
(see CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFamily:
    name: str  # what users type: --model_type NAME
    config_class: type
    base_model_class: type
    generation_model_class: type


MODEL_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    existing = MODEL_FAMILIES.get(family.name)
    if existing is not None and existing != family:
        raise ValueError(f"model family {family.name!r} is already registered with {existing.config_class.__name__}")
    MODEL_FAMILIES[family.name] = family
    return family


def get_family(name: str) -> ModelFamily:
    if name not in MODEL_FAMILIES:
        raise ValueError(f"unknown model_type {name!r}; known: {sorted(MODEL_FAMILIES)}")
    return MODEL_FAMILIES[name]


def declares_field(config_class: type, name: str) -> bool:
    """Does `config_class` (or a base) declare the config field `name`? (a family's own fields, e.g. `pos_tags`)"""
    return any(name in getattr(klass, "__annotations__", {}) for klass in config_class.__mro__)
