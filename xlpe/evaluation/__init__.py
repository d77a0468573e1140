"""Evaluation: translation metrics and significance (`metrics`), word-alignment and reordering quality
(`alignment_quality`), plots, and the two-pass baseline system (`two_pass`, DPE Table 2).

The names of `metrics` are re-exported here (`from xlpe.evaluation import corpus_bleu_chrf` keeps working).
Imports models and features only; never training or the CLI."""

from .metrics import *  # noqa: F401,F403
from .metrics import __all__ as _metrics_all

__all__ = list(_metrics_all)
