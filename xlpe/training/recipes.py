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
