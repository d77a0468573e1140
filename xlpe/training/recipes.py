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
| small | d 256, 3+3 layers, 4 heads, FFN 1024 | 2048 tokens | lr 1e-3, 400 warm-up, 1200 steps | CPU; < 100k pairs on GPU |
| base | Transformer-base: d 512, 6+6, 8 heads, FFN 2048 | 4096 tokens | lr 7e-4, 4000 warm-up, 100k steps | GPU, 100k-5M pairs |
| big | Transformer-big: d 1024, 6+6, 16 heads, FFN 4096 | 4096 tokens | lr 5e-4, 4000 warm-up, 300k steps | GPU, >= 5M pairs |
"""

from __future__ import annotations

RECIPE_NAMES = ("small", "base", "big")
NO_RECIPE = "none"  # `--recipe none`: no recipe at all (transformers' defaults + explicit flags; the benches' choice)
SMALL_DATA_PAIRS = 100_000  # on a GPU, fewer training pairs than this get `small` (Multi30k-size corpora)
BIG_DATA_PAIRS = 5_000_000  # on a GPU, this many pairs or more get `big` (WMT14 en-fr size)

# every recipe: the papers' optimiser, schedule and regularisation; evaluation/early stopping/averaging
_COMMON = dict(
    lr_scheduler_type="inverse_sqrt", label_smoothing_factor=0.1, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.98,
    adam_epsilon=1e-9, eval_strategy="steps", save_strategy="steps", metric_for_best_model="bleu",
    greater_is_better=True, num_beams=4, per_device_eval_batch_size=64,
)  # fmt: skip

# name -> (model + tokenizer defaults: from scratch only, training defaults)
RECIPES: dict[str, tuple[dict, dict]] = {
    "small": (
        dict(d_model=256, encoder_layers=3, decoder_layers=3, attention_heads=4, ffn_dim=1024, dropout=0.1,
             tokenizer_model="bpe", tokenizer_vocab_size=6000),
        dict(learning_rate=1e-3, warmup_steps=400, max_tokens=2048, max_steps=1200, logging_steps=50, eval_steps=200,
             save_steps=200, save_total_limit=3, average_last_checkpoints=3, early_stopping_patience=3,
             generation_num_beams=1),
    ),
    "base": (
        dict(d_model=512, encoder_layers=6, decoder_layers=6, attention_heads=8, ffn_dim=2048, dropout=0.1,
             tokenizer_model="bpe", tokenizer_vocab_size=16000),
        dict(learning_rate=7e-4, warmup_steps=4000, max_tokens=4096, max_steps=100_000, logging_steps=100,
             eval_steps=2000, save_steps=2000, save_total_limit=5, average_last_checkpoints=5,
             early_stopping_patience=10, generation_num_beams=4),
    ),
    "big": (
        dict(d_model=1024, encoder_layers=6, decoder_layers=6, attention_heads=16, ffn_dim=4096, dropout=0.3,
             tokenizer_model="bpe", tokenizer_vocab_size=32000),
        dict(learning_rate=5e-4, warmup_steps=4000, max_tokens=4096, max_steps=300_000, logging_steps=100,
             eval_steps=2000, save_steps=2000, save_total_limit=5, average_last_checkpoints=5,
             early_stopping_patience=10, generation_num_beams=4),
    ),
}  # fmt: skip
EVALUATION_KEYS = ("eval_strategy", "eval_steps", "metric_for_best_model", "greater_is_better", "early_stopping_patience",
                   "generation_num_beams")  # fmt: skip


def recipe_settings(name: str, from_scratch: bool, with_validation: bool = True, with_bleu: bool = True) -> dict:
    """Argument defaults of recipe `name`: without the architecture/tokenizer for a model not built from scratch,
    without periodic evaluation and early stopping when there is no validation split, early stopping on the
    validation loss when evaluation does not generate (no BLEU)."""
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r} is not a recipe; choose one of {list(RECIPE_NAMES)} or {NO_RECIPE!r}")
    model, training = RECIPES[name]
    settings = {**(model if from_scratch else {}), **_COMMON, **training}
    if not with_validation:
        settings = {key: value for key, value in settings.items() if key not in EVALUATION_KEYS}
    elif not with_bleu:
        settings.update(metric_for_best_model="loss", greater_is_better=False)
    return settings


def choose_recipe(train_pairs: int | None, on_gpu: bool) -> tuple[str, str]:
    """(recipe, reason) for a model trained from scratch without `--recipe`: the size the device can train in
    hours and the data can feed without overfitting at once."""
    if not on_gpu:
        return "small", "no GPU: a Transformer-base takes about a day on CPU; `small` trains in under an hour"
    if train_pairs is None:
        return "base", "GPU, training-set size unknown"
    if train_pairs < SMALL_DATA_PAIRS:
        return "small", f"GPU, {train_pairs:,} training pairs < {SMALL_DATA_PAIRS:,}: a bigger model would overfit"
    if train_pairs < BIG_DATA_PAIRS:
        return "base", f"GPU, {train_pairs:,} training pairs (between {SMALL_DATA_PAIRS:,} and {BIG_DATA_PAIRS:,})"
    return "big", f"GPU, {train_pairs:,} training pairs >= {BIG_DATA_PAIRS:,}"


# ---------------------------------------------------------------------------------------------------------
# Fast defaults on CUDA (issue 21): what `xlpe-train` switches on when it trains on a GPU
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
