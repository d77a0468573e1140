"""Training recipes of `xlpe-train` (`--recipe small|base|big`) and the rule that picks one for a model trained
from scratch when none is named.

A recipe is a set of argument defaults: architecture, inverse-sqrt learning-rate schedule with warm-up (as in
Vaswani et al. and both papers), label smoothing 0.1, Adam betas (0.9, 0.98), token-based batches
(`--max_tokens`), evaluation with BLEU every `eval_steps`, early stopping on validation BLEU, and averaging of
the last checkpoints into the final model. Any argument given explicitly (command line or JSON file) wins over
the recipe; the architecture and tokenizer entries apply only to a model built from scratch. See
docs/training.md, "Recipes".

| recipe | model | batches | schedule | meant for |
|---|---|---|---|---|
| tiny | d 128, 2+2 layers, 4 heads, FFN 256 | 2048 tokens | lr 2e-3, 400 warm-up, 480k sentence passes in 10-40 epochs | CPU, < 20k pairs |
| small | d 256, 3+3 layers, 4 heads, FFN 1024 | 2048 tokens | lr 1e-3, 400 warm-up, 150k sentence passes in 2-15 epochs (1200 steps if the size is unknown) | CPU, >= 20k pairs; < 100k pairs on GPU |
| base | Transformer-base: d 512, 6+6, 8 heads, FFN 2048 | 4096 tokens | lr 7e-4, 4000 warm-up, 100k steps | GPU, 100k-5M pairs |
| big | Transformer-big: d 1024, 6+6, 16 heads, FFN 4096 | 4096 tokens | lr 5e-4, 4000 warm-up, 300k steps | GPU, >= 5M pairs |
"""  # noqa: E501 (the recipe table is a table)

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

logger = logging.getLogger("xlpe.train")

NO_RECIPE = "none"  # `--recipe none`: no recipe at all (transformers' defaults + explicit flags; the benches' choice)
SMALL_DATA_PAIRS = 100_000  # on a GPU, fewer training pairs than this get `small` (Multi30k-size corpora)
# `small` trains a budget of sentence passes, in epochs: about SMALL_SENTENCE_PASSES sentences seen,
# between SMALL_EPOCHS_RANGE epochs, so the steps follow the corpus and its sentence lengths (token batches). The
# budget is what both measured settings had: the README walk-through's 10,000 Multi30k fr-en pairs (the former fixed
# 1,200 steps were ~14 epochs of short sentences: test BLEU 40, docs/benchmarks/recipe.md) and the CPU tables'
# 29,000 Multi30k pairs (1,200 steps, ~5 epochs). A corpus of longer sentences gets the same passes, so more steps:
# 12,000 news pairs ~2,900 steps where 1,200 were 5.2 epochs
SMALL_SENTENCE_PASSES = 150_000
SMALL_EPOCHS_RANGE = (2.0, 15.0)
# On a CPU, fewer training pairs than this get `tiny`: a narrower, shallower model at twice the rate, trained for more
# passes. On the news walk-through's 12,000 WMT pairs `small` stopped learning after ~10 epochs (validation loss flat at
# 5.46 while the training loss fell; BLEU 0.5-0.7, chrF 17.9, fluent English unrelated to the source); `tiny` passed
# that loss in 6 epochs and kept improving (docs/benchmarks/recipe.md, "The tiny recipe")
TINY_DATA_PAIRS = 20_000
TINY_SENTENCE_PASSES = 480_000  # 40 epochs of the 12,000 news pairs, the run measured
TINY_EPOCHS_RANGE = (10.0, 40.0)
SIZED_RECIPES = {
    "tiny": (TINY_SENTENCE_PASSES, TINY_EPOCHS_RANGE),
    "small": (SMALL_SENTENCE_PASSES, SMALL_EPOCHS_RANGE),
}
BIG_DATA_PAIRS = 5_000_000  # on a GPU, this many pairs or more get `big` (WMT14 en-fr size)

# sentences a beam-search evaluation decodes at once. On CPU the batch buys no speed and costs memory: the news
# walk-through's 200 validation sentences at 4 beams took the same CPU time at 64, 32 and 16 (147 s) and peaked at
# 1.44, 1.06 and 0.80 GiB (docs/benchmarks/recipe.md, "Memory"); a GPU decodes bigger batches faster
CPU_EVAL_BATCH = 16
GPU_EVAL_BATCH = 64

# the recipes' values (`recipes.json`, package data): "common" to every recipe (the papers' optimiser, schedule and
# regularisation; evaluation, early stopping, averaging), and per recipe its "model" (architecture and tokenizer,
# from scratch only) and "training" defaults. `small` evaluates 200 greedy sentences (~80 s on 2 cores against ~20
# min for the 200 steps between evaluations, fr-en, measured); `tiny` is `small` at half its width and two thirds of
# its depth, twice its rate, sized to more passes, with early stopping on chrF (on a hard small corpus early BLEU is
# noise near zero: 0.1-0.7 on the news run, where early stopping on it ended `small` while chrF still rose). "builtin"
# holds the built-in synthetic corpus' defaults ("builtin_model": from scratch only)
RECIPE_FILE = Path(__file__).with_name("recipes.json")
_TABLES = json.loads(RECIPE_FILE.read_text(encoding="utf-8"))
_COMMON: dict = _TABLES["common"]
# name -> (model + tokenizer defaults: from scratch only, training defaults)
RECIPES: dict[str, tuple[dict, dict]] = {
    name: (recipe["model"], recipe["training"]) for name, recipe in _TABLES["recipes"].items()
}
RECIPE_NAMES = tuple(RECIPES)  # tiny, small, base, big


def builtin_recipe(from_scratch: bool) -> dict:
    """Defaults for the built-in corpus: a small model that learns the SVO -> SOV reordering in a few CPU
    minutes. Model-size entries apply only to a model trained from scratch."""
    return {**_TABLES["builtin"], **(_TABLES["builtin_model"] if from_scratch else {})}


EVALUATION_KEYS = (
    "eval_strategy",
    "eval_steps",
    "metric_for_best_model",
    "greater_is_better",
    "early_stopping_patience",
    "generation_num_beams",
    "eval_subset",
)


def sized_epochs(name: str, train_pairs: int) -> float:
    """Epochs of a sized recipe (SIZED_RECIPES: `tiny`, `small`) for a training set of `train_pairs` pairs: its
    sentence passes / pairs, to one decimal, within its epoch range."""
    passes, (low, high) = SIZED_RECIPES[name]
    return round(min(max(passes / max(train_pairs, 1), low), high), 1)


def small_epochs(train_pairs: int) -> float:
    """Epochs of the `small` recipe for a training set of `train_pairs` pairs (`sized_epochs`)."""
    return sized_epochs("small", train_pairs)


def recipe_settings(
    name: str,
    from_scratch: bool,
    with_validation: bool = True,
    with_bleu: bool = True,
    device: dict | None = None,
    train_pairs: int | None = None,
) -> dict:
    """Argument defaults of recipe `name`: without the architecture/tokenizer for a model not built from scratch,
    without periodic evaluation and early stopping when there is no validation split, early stopping on the
    validation loss when evaluation does not generate (no BLEU); on a CUDA `device` (`arguments.describe_device`)
    with its token batch (and, for `small` from scratch, its width) fitted to the device (`fit_recipe_to_device`).
    `tiny` and `small` with a known `train_pairs`: epochs (`sized_epochs`) instead of their fixed steps."""
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r} is not a recipe; choose one of {list(RECIPE_NAMES)} or {NO_RECIPE!r}")
    model, training = RECIPES[name]
    settings = {**(model if from_scratch else {}), **_COMMON, **training}
    if name in SIZED_RECIPES and train_pairs is not None:
        settings.update(num_train_epochs=sized_epochs(name, train_pairs), max_steps=-1)
    if device and device.get("type") == "cuda":
        settings["per_device_eval_batch_size"] = GPU_EVAL_BATCH
        settings, notes = fit_recipe_to_device(name, settings, device)
        for note in notes:
            logger.info("recipe %s on %s: %s", name, device.get("name", "CUDA device"), note)
    if not with_validation:
        settings = {key: value for key, value in settings.items() if key not in EVALUATION_KEYS}
    elif not with_bleu:
        settings.update(metric_for_best_model="loss", greater_is_better=False)
    return settings


def choose_recipe(train_pairs: int | None, on_gpu: bool) -> tuple[str, str]:
    """(recipe, reason) for a model trained from scratch without `--recipe`: the size the device can train in
    hours and the data can feed without overfitting at once."""
    if not on_gpu:
        if train_pairs is not None and train_pairs < TINY_DATA_PAIRS:
            return "tiny", (
                f"no GPU, {train_pairs:,} training pairs < {TINY_DATA_PAIRS:,}: a smaller model trained for more "
                "passes learns more from a small corpus than `small` (the plan below estimates the run's time)"
            )
        return "small", (
            "no GPU: a Transformer-base takes about a day on CPU; `small` is sized for a CPU (the plan "
            "below estimates the run's time on this machine)"
        )
    if train_pairs is None:
        return "base", "GPU, training-set size unknown"
    if train_pairs < SMALL_DATA_PAIRS:
        return "small", f"GPU, {train_pairs:,} training pairs < {SMALL_DATA_PAIRS:,}: a bigger model would overfit"
    if train_pairs < BIG_DATA_PAIRS:
        return "base", f"GPU, {train_pairs:,} training pairs (between {SMALL_DATA_PAIRS:,} and {BIG_DATA_PAIRS:,})"
    return "big", f"GPU, {train_pairs:,} training pairs >= {BIG_DATA_PAIRS:,}"


# ---------------------------------------------------------------------------------------------------------
# A recipe fitted to the GPU: a token batch that keeps the device busy, a wider `small` on big GPUs
# ---------------------------------------------------------------------------------------------------------

GPU_FILL_MICROSECONDS = 20.0  # a step's FFN matmul should take >= this at the device's peak (a launch is ~5 us)
GPU_MAX_TOKENS = 32768  # most tokens per step a recipe gets on one GPU (above: the model is widened instead)
GPU_MEMORY_SHARE = 0.5  # share of the device memory the estimated activations of one step may take
# `small` on a GPU where its d 256 would need more than GPU_MAX_TOKENS to fill the device: the same depth at
# Transformer-base width (IWSLT'14-style dropout 0.3 for < 100k pairs; base's peak learning rate for d 512)
SMALL_WIDE_MODEL = dict(d_model=512, attention_heads=8, ffn_dim=2048, dropout=0.3)
SMALL_WIDE_TRAINING = dict(learning_rate=7e-4)


def step_bytes_per_token(d_model: int, ffn_dim: int, layers: int, vocab: int) -> float:
    """Rough bytes of saved activations per (padded) token of a training step under bf16 autocast: per layer
    ~40 d-wide and 6 FFN-wide values of 2 bytes kept for the backward pass (attention, norms, dropout masks,
    the FFN), and ~10 bytes per vocabulary entry for the output logits (bf16 logits, fp32 copy for the loss,
    and its gradient). An estimate to keep the batch well inside the device memory, not a measurement."""
    return layers * (40.0 * d_model + 6.0 * ffn_dim) + 10.0 * vocab


def fill_tokens(device: dict, d_model: int, ffn_dim: int) -> tuple[float | None, str]:
    """(tokens, why): the tokens a step needs for its FFN matmul (tokens x d x FFN, 2 FLOPs per MAC) to take
    GPU_FILL_MICROSECONDS at the CUDA `device`'s dense peak ({"name", "capability", "multi_processor_count"};
    bf16 on compute capability >= 8.0, fp32 below; `throughput.device_peak`, a MIG slice scaled by its SMs).
    A device of unknown peak: 128 tokens per SM (one tile row each); of unknown SM count too: None."""
    from .throughput import device_peak

    mode = "bfloat16" if tuple(device.get("capability") or (0, 0)) >= (8, 0) else "float32"
    sms = device.get("multi_processor_count")
    peak, _ = device_peak(device.get("name"), mode, sms)
    if peak:
        wanted = peak * 1e12 * GPU_FILL_MICROSECONDS * 1e-6 / (2.0 * d_model * ffn_dim)
        return (
            wanted,
            f"{wanted:,.0f} tokens keep a {d_model}x{ffn_dim} FFN matmul >= {GPU_FILL_MICROSECONDS:g} us "
            f"at {peak:g} TFLOP/s ({mode})",
        )
    if sms:
        return 128.0 * sms, f"peak unknown: 128 tokens per SM x {sms} SMs"
    return None, "peak and SM count unknown"


def device_token_batch(
    device: dict, d_model: int, ffn_dim: int, layers: int, vocab: int, floor: int
) -> tuple[int, str]:
    """(tokens per step, why) for a model of these dimensions on a CUDA `device` (`fill_tokens`'s fields and
    "memory", bytes): the power of two >= `fill_tokens`, never below `floor` (the recipe's own batch), at most
    GPU_MAX_TOKENS and what GPU_MEMORY_SHARE of the memory holds (`step_bytes_per_token`); `floor` when the
    device's peak and SM count are unknown."""
    wanted, why = fill_tokens(device, d_model, ffn_dim)
    if wanted is None:
        return floor, why + ": the recipe's batch"
    tokens = max(2 ** math.ceil(math.log2(max(wanted, 1.0))), floor)
    cap = GPU_MAX_TOKENS
    memory = device.get("memory")
    if memory:
        fits = int(GPU_MEMORY_SHARE * memory / step_bytes_per_token(d_model, ffn_dim, layers, vocab)) // 1024 * 1024
        if fits < cap:
            cap, why = max(fits, floor), why + f"; {fits:,} fit in {GPU_MEMORY_SHARE:.0%} of {memory / 2**30:.0f} GiB"
    return min(tokens, cap), why


def fit_recipe_to_device(name: str, settings: dict, device: dict) -> tuple[dict, list[str]]:
    """Recipe `name`'s `settings` (from `recipe_settings`) fitted to a CUDA `device` and the notes saying how.
    A recipe's batch is sized for the papers' GPUs (4096 tokens per GPU, `small` 2048 for CPU): on one large
    GPU a step of a d 256 model on 2048 tokens is bound by kernel launches, not arithmetic. So:

    * `small` with its architecture (a model from scratch) is widened to SMALL_WIDE_MODEL (d 512, FFN 2048,
      3+3 layers) when its own width would need more than GPU_MAX_TOKENS tokens a step to fill the device
      (an H100/H200: ~38k tokens at d 256; an A100 or L4 keeps d 256);
    * `max_tokens` becomes `device_token_batch` for the model's width (H100: 16,384 at d 512 or base; A100:
      16,384 at d 256; L4: 8,192), never below the recipe's own.

    Settings without `max_tokens` (a sentence batching replaced it) keep their batch. Pure: testable with a
    fake device."""
    settings, notes = dict(settings), []
    if "max_tokens" not in settings:
        return settings, notes
    model = RECIPES[name][0]
    d_model, ffn_dim = settings.get("d_model", model["d_model"]), settings.get("ffn_dim", model["ffn_dim"])
    layers = settings.get("encoder_layers", model["encoder_layers"]) + settings.get(
        "decoder_layers", model["decoder_layers"]
    )
    vocab = settings.get("tokenizer_vocab_size", model["tokenizer_vocab_size"])
    floor = settings["max_tokens"]
    if name == "small" and "d_model" in settings:
        wanted, _ = fill_tokens(device, d_model, ffn_dim)
        if wanted is not None and wanted > GPU_MAX_TOKENS:
            settings.update(SMALL_WIDE_MODEL, **SMALL_WIDE_TRAINING)
            d_model, ffn_dim = SMALL_WIDE_MODEL["d_model"], SMALL_WIDE_MODEL["ffn_dim"]
            notes.append(
                f"d {model['d_model']} would need {wanted:,.0f} > {GPU_MAX_TOKENS:,} tokens a step to fill the GPU: "
                + ", ".join(f"{key} {value}" for key, value in {**SMALL_WIDE_MODEL, **SMALL_WIDE_TRAINING}.items())
            )
    tokens, why = device_token_batch(device, d_model, ffn_dim, layers, vocab, floor)
    if tokens != floor:
        settings["max_tokens"] = tokens
        notes.append(f"max_tokens {tokens:,} instead of {floor:,} ({why})")
    return settings, notes


# ---------------------------------------------------------------------------------------------------------
# Fast defaults on CUDA: what `xlpe-train` switches on when it trains on a GPU
# ---------------------------------------------------------------------------------------------------------

CUDA_DEFAULT_MAX_TOKENS = 4096  # token batches when neither the user nor a recipe chose a batching (papers: 4096/GPU)
SENTENCE_BATCHING = ("per_device_train_batch_size", "train_sampling_strategy", "auto_find_batch_size")
PRECISION_FLAGS = ("bf16", "fp16")
COMPILE_FLAGS = ("torch_compile", "torch_compile_backend", "torch_compile_mode")


def cuda_fast_defaults(device: dict | None, given, sharded: bool = False) -> dict:
    """The training switches `xlpe-train` turns on by default on a CUDA device, decided from a plain description
    of the device and the names of the arguments already set (pure: no torch, testable with a fake device).

    Args:
        device: None (not CUDA: nothing is switched on) or {"type": "cuda", "name": str, "capability": (major,
            minor), "compile": bool (a compiler back-end, Triton, is installed), "cpus": int}.
        given: argument names given explicitly or by a recipe; they are never changed.
        sharded: FSDP or DeepSpeed is in use (torch.compile is then left to the user).

    Returns {"applied": {argument: value}, "kept": {argument: why not switched on}}:
      * `bf16` (autocast, fp32 master weights) on compute capability >= 8.0 (Ampere and later), unless `--bf16`
        or `--fp16` was given;
      * `optim` = `adamw_torch_fused`, unless `--optim` was given;
      * `torch_compile` (inductor), unless a `--torch_compile*` flag was given (`--torch_compile False` turns it
        off), FSDP/DeepSpeed is in use, or no compiler back-end is installed;
      * `max_tokens` = CUDA_DEFAULT_MAX_TOKENS (length-bucketed token batches), unless `--max_tokens` or a
        sentence batching was given (a recipe's batching counts as given);
      * `dataloader_num_workers` = 2 (collation beside the training loop) on machines with >= 4 CPU cores,
        unless given.
    """
    if not device or device.get("type") != "cuda":
        return {"applied": {}, "kept": {}}
    given = set(given)
    applied, kept = {}, {}
    capability = tuple(device.get("capability") or (0, 0))
    if given & set(PRECISION_FLAGS):
        kept["bf16"] = "precision given (--" + "/--".join(sorted(given & set(PRECISION_FLAGS))) + ")"
    elif capability >= (8, 0):
        applied["bf16"] = True
    else:
        kept["bf16"] = f"compute capability {capability[0]}.{capability[1]} < 8.0 has no fast bf16: fp32"
    if "optim" in given:
        kept["optim"] = "--optim given"
    else:
        applied["optim"] = "adamw_torch_fused"
    if given & set(COMPILE_FLAGS):
        kept["torch_compile"] = "--" + "/--".join(sorted(given & set(COMPILE_FLAGS))) + " given"
    elif sharded:
        kept["torch_compile"] = "FSDP/DeepSpeed: compile is left to the user (--torch_compile True)"
    elif not device.get("compile", True):
        kept["torch_compile"] = "no compiler back-end (triton) installed"
    else:
        applied["torch_compile"] = True
    batching = given & {"max_tokens", *SENTENCE_BATCHING}
    if batching:
        kept["max_tokens"] = "batching given (--" + "/--".join(sorted(batching)) + ")"
    else:
        applied["max_tokens"] = CUDA_DEFAULT_MAX_TOKENS
    if "dataloader_num_workers" in given:
        kept["dataloader_num_workers"] = "given"
    elif (device.get("cpus") or 0) >= 4:
        applied["dataloader_num_workers"] = 2
    return {"applied": applied, "kept": kept}


def describe_fast_defaults(decision: dict, device: dict | None) -> str:
    """One line for the log: the switches turned on, and those left as given (and why)."""
    if not device or device.get("type") != "cuda":
        return ""
    on = " ".join(f"--{key} {value}" for key, value in decision["applied"].items()) or "nothing"
    text = f"xlpe-train: CUDA defaults on {device.get('name', 'CUDA device')}: {on}"
    if decision["kept"]:
        text += "; left as given: " + "; ".join(f"{key} ({why})" for key, why in decision["kept"].items())
    return text + ". Explicit flags override them (e.g. --torch_compile False, --bf16 False, --optim adamw_torch)."
