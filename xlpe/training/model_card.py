"""Model cards for trained xlpe models: `huggingface_hub.ModelCard` from `hub_cards/model_card_template.md`.

Every model gets one: an xlpe family's, or a stock architecture's (`is_stock`: MarianMT, BART, ... named as such, with
the same data, training and evaluation facts). The card's metadata (YAML header) carries what the Hub indexes:
`language`, `license` (only one that was given), `datasets`,
`library_name: transformers`, `pipeline_tag: translation`, `tags` ("xlpe", the family, the family's variant,
the model type), `base_model` when a stock checkpoint was upgraded, and `model-index` with one result per
metric and dataset whose `config` is the sacrebleu signature. The text says what the position encoding is
(a section per family), lists the variant's settings read from the config, the sizes (parameters, vocabulary,
layers, d_model), the data, the training recipe, settings and every recorded option, the standalone reorderer
when the checkpoint carries one (`config.reorderer_config`: its settings, its Kendall tau when recorded there,
and its held-out tau beside the source order's, with a plain sentence when it does not beat the source order;
nothing is made up), what supplies an XL PE model's predicted positions (`card_facts.positions_source`), the
scores with their sacrebleu signatures (validation and test) or that they are pending, or that they were measured
with other positions than the shipped model's (a reorderer attached since: `rerender_in_place`),
and shows how to load the model (`trust_remote_code=True` for the model and the tokenizer, and
`pipeline("translation", ...)`) on a sentence in the source language. A model whose learning check failed
(`learning_check.json`) says so at the top.

`write_training_card` is what `xlpe-train` calls when its final evaluation starts and after each of its stages
(validation, test): the facts and where each comes from are `card_facts.gather_card`'s, what the run card says
about the run is `run_card`'s. `xlpe-push` renders the recorded card again (`rerender_for_push`), or, for a
folder without a record, gathers the same facts from the folder (`xlpe.training.push.prepare_upload_folder`).

Evaluation entries (`eval_results`) are dicts in the shape `xlpe-evaluate bleu` prints: metric keys whose
value has a "score" (and "signature"), plus `dataset_name`, `dataset_type`, `dataset_split`,
`dataset_config`; `evaluation_entry` builds one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import AutoConfig, PretrainedConfig

from ..models import register_with_transformers
from ..models.registry import MODEL_FAMILIES, family_of_model_type
from .card_facts import (
    BUILTIN_PREDICTOR,
    HELD_OUT_KEY,
    data_sizes,
    evaluation_entry,
    learning_check,
    positions_source,
    reorderer_quality,
    validation_entry,
)
from .run_card import CARD_INPUTS

register_with_transformers()  # the xlpe families with the Auto classes (AutoConfig/AutoModel* below read them)

TEMPLATE_NAME = "model_card_template.md"
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF", "ter": "TER", "aer": "AER"}
ARCHITECTURE_FIELDS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "vocab_size",
    "max_position_embeddings",
)

# ---------------------------------------------------------------------------------------------------------
# What the config says
# ---------------------------------------------------------------------------------------------------------


# stock architectures a card names by their transformers title (a stock run: `--model_type vanilla`, an OPUS-MT or
# BART checkpoint fine-tuned without --model_type); another stock model_type is named by its model_type
STOCK_TITLES = {"marian": "MarianMT", "bart": "BART", "mbart": "mBART", "t5": "T5", "mt5": "mT5", "m2m_100": "M2M100"}


def family_of(config: PretrainedConfig) -> str:
    """The registered family name of a config (by model_type), e.g. "xlpe"; a ValueError for a stock model type
    (`is_stock`)."""
    family = family_of_model_type(config.model_type)
    if family is not None:
        return family.name
    raise ValueError(f"model_type {config.model_type!r} is not an xlpe family; known: {sorted(MODEL_FAMILIES)}")


def is_stock(config: PretrainedConfig) -> bool:
    """Whether the config is of a stock transformers architecture (no xlpe family): its card says so."""
    return family_of_model_type(config.model_type) is None


def stock_title(config: PretrainedConfig) -> str:
    """The stock architecture's name on the card ("MarianMT", "BART"; else the model_type)."""
    return STOCK_TITLES.get(config.model_type, config.model_type)


def variant_settings(config: PretrainedConfig) -> dict:
    """The fields the family's config declares on top of its stock base config (annotated class attributes,
    see CONTRIBUTING.md), with this model's values."""
    names: list[str] = []
    for cls in type(config).__mro__:
        if cls.__module__.startswith("transformers.") or cls is object:
            break
        declared = vars(cls).get("__annotations__", {})
        names += [name for name in declared if name not in names and not name.startswith("_")]
    return {name: getattr(config, name) for name in names if hasattr(config, name)}


def __getattr__(name: str):
    """The old tables `FAMILY_TITLES` and `VARIANT_OF`, now read off the registry (deprecated)."""
    moved = {"FAMILY_TITLES": "ModelFamily.title", "VARIANT_OF": "ModelFamily.variant_of (or variant_name(config))"}
    if name not in moved:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"xlpe.training.model_card.{name} is deprecated: each family's is {moved[name]} (xlpe.models.registry)",
        DeprecationWarning,
        stacklevel=2,
    )
    if name == "FAMILY_TITLES":
        return {family.name: family.title for family in MODEL_FAMILIES.values()}
    return {family.name: family.variant_of for family in MODEL_FAMILIES.values() if family.variant is not None}


def variant_name(config: PretrainedConfig) -> str | None:
    """The model's position variant in one word, for the Hub tag "<family>-<variant>": what its family's `variant`
    says (`ModelFamily.variant`, e.g. "combination" for XL PE's `xl_strategy`), else the value of the first
    declared `*strategy` field, if any."""
    if is_stock(config):
        return None
    family = MODEL_FAMILIES[family_of(config)]
    if family.variant is not None:
        return family.variant_of(config)
    for name, value in variant_settings(config).items():
        if name.endswith("strategy") and isinstance(value, str):
            return value
    return None


def _parameter_count(model_or_dir) -> int | None:
    if hasattr(model_or_dir, "parameters"):
        return sum(p.numel() for p in model_or_dir.parameters())
    files = sorted(Path(model_or_dir).glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    total = 0
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118  (safe_open is not a dict)
                shape = handle.get_slice(key).get_shape()
                total += math.prod(shape)
    return total


# ---------------------------------------------------------------------------------------------------------
# Evaluation entries -> model-index
# ---------------------------------------------------------------------------------------------------------


def _metric_items(entry: Mapping):
    for key, value in entry.items():
        if isinstance(value, Mapping) and isinstance(value.get("score"), (int, float)):
            yield key, float(value["score"]), value.get("signature")


def reorderer_summary(config: PretrainedConfig, folder: str | Path | None = None) -> dict | None:
    """What the card says about a standalone reorderer riding inside the checkpoint (`reorderer_config`): its
    architecture fields, its Kendall tau only if the checkpoint records one (any `*kendall*` entry, at the top
    level or one level down), and `held_out`: its held-out tau beside the source order's
    (`card_facts.reorderer_quality`), from the training report attached beside the model in `folder`
    (`reorderer/reorderer_training.json`) or else the figures attach put into the config; None when there is no
    reorderer."""
    reorderer = getattr(config, "reorderer_config", None)
    if not reorderer:
        return None
    reorderer = reorderer if isinstance(reorderer, Mapping) else reorderer.to_dict()
    fields = (
        "decoder",
        "training_loss",
        "pair_scorer",
        "d_model",
        "token_layers",
        "word_layers",
        "max_words",
        "order_prior",
    )
    quality = {key: value for key, value in reorderer.items() if "kendall" in key.lower()}
    for key, value in reorderer.items():
        if isinstance(value, Mapping) and key != HELD_OUT_KEY:
            quality.update({f"{key}.{k}": v for k, v in value.items() if "kendall" in k.lower()})
    return {
        "settings": [(f, json.dumps(reorderer[f])) for f in fields if f in reorderer],
        "kendall_tau": [(k, v) for k, v in quality.items()],
        "held_out": reorderer_quality(reorderer, folder),
    }


def _eval_results(entries: Sequence[Mapping]) -> list[EvalResult]:
    results = []
    for entry in entries:
        if "dataset_name" not in entry or "dataset_type" not in entry:
            raise ValueError(f"an evaluation entry needs dataset_name and dataset_type, got keys {sorted(entry)}")
        for metric, value, signature in _metric_items(entry):
            results.append(
                EvalResult(
                    task_type="translation",
                    task_name="Translation",
                    dataset_type=entry["dataset_type"],
                    dataset_name=entry["dataset_name"],
                    dataset_split=entry.get("dataset_split"),
                    dataset_config=entry.get("dataset_config"),
                    metric_type=metric,
                    metric_name=METRIC_NAMES.get(metric, metric),
                    metric_value=round(value, 2),
                    metric_config=signature,
                )
            )
    return results


# ---------------------------------------------------------------------------------------------------------
# The card
# ---------------------------------------------------------------------------------------------------------


def find_template(template_path: str | Path | None = None) -> Path:
    """`template_path`, else $XLPE_HUB_CARDS/<name>, hub_cards/ of this checkout, or <prefix>/share/xlpe/hub_cards."""
    candidates = [Path(template_path)] if template_path else []
    if os.environ.get("XLPE_HUB_CARDS"):
        candidates.append(Path(os.environ["XLPE_HUB_CARDS"]) / TEMPLATE_NAME)
    candidates += [
        Path(__file__).resolve().parents[2] / "hub_cards" / TEMPLATE_NAME,  # xlpe/training/ -> checkout
        Path(sys.prefix) / "share" / "xlpe" / "hub_cards" / TEMPLATE_NAME,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"model card template not found; tried {[str(c) for c in candidates]}")


def _as_list(value) -> list | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def build_model_card(
    model_or_dir,
    repo_id: str | None = None,
    languages: str | Sequence[str] | None = None,
    license: str | None = None,
    datasets: str | Sequence[str] | None = None,
    base_model: str | None = None,
    eval_results: Mapping | Sequence[Mapping] | None = None,
    training: Mapping | None = None,
    data: Mapping | None = None,
    recipe: str | None = None,
    summary: str | None = None,
    example_source: str | None = None,
    template_path: str | Path | None = None,
    preprocessing: str | None = None,
    translations_file: str | None = None,
    options: Sequence | None = None,
    pending: Sequence[str] = (),
    scored_positions: str | None = None,
) -> ModelCard:
    """The model card of a trained model (a `PreTrainedModel` or the directory it was saved to).

    Args:
        repo_id: Hub id used in the card's code snippets and as the model-index name (default: dir name).
        languages: ISO codes, source first (e.g. ["de", "en"]).
        license: SPDX-style id of the model's license (mind the training data's terms); None: the card states
            none (no `license` in the metadata).
        datasets: Hub dataset ids or names of the training data.
        base_model: Hub id of the stock checkpoint this model was upgraded from, if any.
        eval_results: one or more evaluation entries (module docstring; `evaluation_entry`).
        training: hyper-parameters to list (name -> value), e.g. from the training arguments.
        data: pairs per split, {split: {"pairs_read", "pairs_kept", "pairs_skipped"}} (`data_sizes`) or {split: N}.
        recipe: the named training recipe the run used, if any (shown with the settings).
        summary: one paragraph at the top; a default names the family and languages.
        example_source: the sentence used in the usage snippets, in the source language; without one, a
            placeholder that the card says is one.
        preprocessing: the preprocessing in prose (tokenizer, aligner, filters), shown with the data.
        translations_file: the file beside the card with the test translations, linked from the evaluation.
        options: (flag, value) of every option that made the run (`card_facts.recorded_options`).
        pending: evaluation stages whose scores are not in yet ("validation", "test"): the card says so.
        scored_positions: what supplied the positions when the scores were measured (`positions_source`); when the
            model's own differs (a reorderer attached since), the card says the scores are not the shipped
            model's and leaves them out of the model-index.
    An evaluation entry's `sentences` (the sentences scored) is shown in its row; so is a data split's
    `sentences_scored`. For a model directory, its learning check (`learning_check.json`) is read: a model that
    did not learn says so at the top.
    """

    config = model_or_dir.config if hasattr(model_or_dir, "config") else AutoConfig.from_pretrained(model_or_dir)
    stock = is_stock(config)
    family = None if stock else family_of(config)
    variant = variant_name(config)
    shipped_positions = positions_source(config)
    stale = scored_positions is not None and shipped_positions is not None and scored_positions != shipped_positions
    languages = _as_list(languages)
    datasets = _as_list(datasets)
    entries = [eval_results] if isinstance(eval_results, Mapping) else list(eval_results or [])
    name = repo_id or (
        Path(model_or_dir).name if not hasattr(model_or_dir, "config") else f"{family or config.model_type}-model"
    )
    custom_code = bool(getattr(config, "auto_map", None) or getattr(config, "custom_pipelines", None))
    tags = list(
        dict.fromkeys(
            [
                "translation",
                "xlpe",
                *([family] if family else []),
                *([f"{family}-{variant}"] if variant else []),
                config.model_type,
                *(["custom_code"] if custom_code or not stock else []),
            ]
        )
    )
    card_data = ModelCardData(
        language=languages,
        license=license or None,
        datasets=datasets,
        library_name="transformers",
        pipeline_tag="translation",
        tags=tags,
        base_model=base_model,
        model_name=name,
        eval_results=(None if stale else _eval_results(entries)) or None,
    )
    settings = [
        (key, json.dumps(value)) for key, value in variant_settings(config).items() if key != "reorderer_config"
    ]  # (its own section)
    architecture = [(f, getattr(config, f)) for f in ARCHITECTURE_FIELDS if getattr(config, f, None) is not None]
    parameters = _parameter_count(model_or_dir)
    languages_text = " → ".join(languages) if languages else "not stated"
    eval_rows = [
        {
            "dataset": entry["dataset_name"] + (f" ({entry['dataset_config']})" if entry.get("dataset_config") else ""),
            "split": entry.get("dataset_split") or "",
            "metric": METRIC_NAMES.get(metric, metric),
            "value": f"{value:.2f}",
            "signature": (signature or "n/a").replace("|", "\\|"),  # a bare | would split the table cell
            "signature_plain": signature or "n/a",
            "sentences": f"{entry['sentences']:,}" if isinstance(entry.get("sentences"), int) else "",
        }
        for entry in entries
        for metric, value, signature in _metric_items(entry)
    ]
    family_title = f"stock {stock_title(config)}" if stock else MODEL_FAMILIES[family].title
    check = None if hasattr(model_or_dir, "config") else learning_check(model_or_dir)
    source_language = languages[0] if languages else None
    placeholder = None
    if not example_source:
        example_source = f"A sentence in {source_language}." if source_language else "A source-language sentence."
        placeholder = source_language or "the source language"
    return ModelCard.from_template(
        card_data,
        template_path=str(find_template(template_path)),
        title=name,
        summary=summary
        or (
            f"A {languages_text} translation model of the stock {stock_title(config)} architecture (no xlpe position "
            "encoding), trained with `xlpe`."
            if stock
            else f"A {languages_text} translation model of the {family_title} family, built with `xlpe`."
        ),
        family=family or "stock",
        stock_title=stock_title(config) if stock else None,
        custom_code=custom_code,
        license=license or None,
        positions=shipped_positions,
        attached=shipped_positions not in (None, BUILTIN_PREDICTOR),
        stale_scores={"scored": scored_positions, "shipped": shipped_positions} if stale else None,
        family_title=family_title,
        model_type=config.model_type,
        variant_text=f"`{variant}`" if variant else "the family's default",
        languages_text=languages_text,
        datasets_text=", ".join(datasets) if datasets else "unstated data",
        parameters=f"{parameters:,}" if parameters else None,
        variant_settings=settings,
        architecture=architecture,
        training=[(key, value) for key, value in (training or {}).items()],
        eval_rows=eval_rows,
        repo_id=name,
        example_source=example_source.replace("\\", "\\\\").replace('"', '\\"'),
        example_placeholder=placeholder,
        data_rows=_data_rows(data),
        recipe=recipe,
        reorderer=reorderer_summary(config, None if hasattr(model_or_dir, "config") else model_or_dir),
        preprocessing=preprocessing,
        translations_file=translations_file,
        options=[(flag, str(value).replace("|", "\\|")) for flag, value in (options or [])],
        pending=", ".join(pending) if pending else None,
        learning_check=check if check and check["ok"] is False else None,
    )


def _data_rows(data: Mapping | None) -> list[dict]:
    rows = []
    for split, value in (data or {}).items():
        value = value if isinstance(value, Mapping) else {"pairs_kept": value}
        rows.append(
            {
                "split": split,
                **{
                    key: "" if value.get(key) is None else f"{value[key]:,}"
                    for key in ("pairs_read", "pairs_kept", "pairs_skipped", "sentences_scored")
                },
            }
        )
    return rows


def write_model_card(directory: str | Path, **kwargs) -> Path:
    """Build the card of the model saved in `directory` and write it there as README.md."""
    path = Path(directory) / "README.md"
    build_model_card(directory, **kwargs).save(path)
    return path


def write_training_card(
    output_dir,
    run,
    metrics: Mapping,
    facts: Mapping | None = None,
    pending: Sequence[str] = (),
) -> Path:
    """The card `xlpe-train` writes into `output_dir`: when the final evaluation starts (`pending`: the stages
    still to run, whose scores the card says are pending) and again after each stage. The facts come from the run
    (`card_facts.gather_card`: data, pairs per split, arguments, sizes, time, scores, a source sentence of the
    run's data as the usage example); they are recorded in `xlpe_card.json` so that `xlpe-push` renders the same
    card again with the Hub id. `run`: the run's `RunConfig`; `facts`: what the run measured
    (`run_card.training_settings`)."""
    from .card_facts import gather_card

    card = gather_card(output_dir, run, metrics, facts or {}, pending)
    return render_recorded_card(output_dir, card)


# ---------------------------------------------------------------------------------------------------------
# Record, render, render again at push (run_card.py says what the card holds; this file renders it)
# ---------------------------------------------------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def render_recorded_card(directory, card: Mapping) -> Path:
    """Render the card from recorded keyword arguments (`build_model_card`'s) into `directory/README.md`, and
    record them with the digest of what was written."""
    from ..features.text_files import write_text_atomic

    directory = Path(directory)
    path = write_model_card(directory, **card)
    write_text_atomic(
        directory / CARD_INPUTS,
        json.dumps({"card": dict(card), "readme_sha256": _digest(path)}, indent=2, ensure_ascii=False, default=str),
    )
    return path


def rerender_for_push(folder, card_kwargs: Mapping, regenerate: bool = False) -> bool:
    """For a folder whose card `xlpe-train` wrote (`xlpe_card.json`): render it again with the push's arguments
    (the Hub id; languages, datasets, ... when given) unless the README was edited since (then it is left as is,
    unless `regenerate`). Returns whether the card was rendered."""
    folder = Path(folder)
    record_file, readme = folder / CARD_INPUTS, folder / "README.md"
    if not record_file.is_file():
        return False
    record = json.loads(record_file.read_text(encoding="utf-8"))
    untouched = readme.is_file() and _digest(readme) == record.get("readme_sha256")
    if not (regenerate or untouched or not readme.is_file()):
        return False
    given = {key: value for key, value in dict(card_kwargs).items() if value not in (None, [], (), "")}
    if "eval_results" in given:  # scores given now replace the run's: they are of the model as it is
        given["scored_positions"] = None
    render_recorded_card(folder, {**record["card"], **given})
    return True


def rerender_in_place(folder, source_folder=None) -> bool:
    """Render the card of `folder` again from its record (`xlpe_card.json`, else `source_folder`'s: a model written
    elsewhere from that one, e.g. `xlpe-reorder attach --output_dir`) and the files now there: the config (an
    attached reorderer: its section, the positions it supplies, the scores measured before it marked as not the
    shipped model's), the tokenizer, the learning check. Skipped (False) without a record, or when the README was
    edited since it was rendered; a translations file the folder does not hold is no longer linked."""
    folder = Path(folder)
    record_file = folder / CARD_INPUTS
    if not record_file.is_file() and source_folder is not None:
        record_file = Path(source_folder) / CARD_INPUTS
    if not record_file.is_file():
        return False
    record = json.loads(record_file.read_text(encoding="utf-8"))
    readme = folder / "README.md"
    if readme.is_file() and _digest(readme) != record.get("readme_sha256"):
        return False
    card = dict(record["card"])
    if card.get("translations_file") and not (folder / card["translations_file"]).is_file():
        card["translations_file"] = None
    render_recorded_card(folder, card)
    return True


__all__ = [
    "build_model_card",
    "data_sizes",
    "evaluation_entry",
    "family_of",
    "find_template",
    "render_recorded_card",
    "reorderer_summary",
    "rerender_for_push",
    "rerender_in_place",
    "validation_entry",
    "variant_settings",
    "write_model_card",
    "write_training_card",
]
