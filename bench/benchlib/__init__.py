"""Shared pieces of the benchmark drivers in bench/ (never imported by the xlpe package):

* `data`: where the shared data lives, Multi30k slices;
* `tables`: mean ± std, run dates, replacing one `## Section` of a benchmark page, tables rendered from results files;
* `timing`: interleaved, repeated timing of several models on the same batches (CUDA events, warm-up until
  stable, switches: precision, AdamW implementation, compile), peak memory, ratios;
* `speed_models`: the models `speed.py` times, each beside the stock model it is compared with, and its batches;
* `lengths`: real sentence-length distributions (stored JSON) that the speed batches are drawn from;
* `reproduction` and `reproduction_report`: the papers' comparisons that `reproduce.py` runs and reports.

Each driver (`speed.py`, `reproduce.py`, `prepare.py`, ...) puts bench/ on `sys.path` and imports from here.
"""
