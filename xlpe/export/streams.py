"""Decoding several batches at once ("streams"): how `xlpe-export --translate` uses more than one core.

Given two cores, onnxruntime's products hardly use the second intra-op thread (an OPUS-MT-size int8 decoder step:
19.7 ms with one thread, 17.9 ms with two), but two batches decoded side by side, one thread each, give ~1.9x the
sentences a second of one (docs/benchmarks/onnx.md, "Streams"). So a translator built with `streams=S` and `threads=T`
runs its graphs with T // S intra-op threads and `translate_batches` keeps S batches in flight, each on its own Python
thread: onnxruntime and CTranslate2 release the GIL while they compute, and the numpy search between the steps is
short. CTranslate2's own form of this is `inter_threads` (`CTranslate2Translator(streams=S)` sets it).

Nothing else changes: each batch is translated exactly as `translate_with_report` translates it alone (the same
tokens, tested), results come back in the batches' order, and the translators hold a lock around their tokenizer
(a fast tokenizer refuses concurrent calls that change its truncation settings).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor


def check_streams(streams) -> int:
    """`streams` as a positive int, or a ValueError naming it."""
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"streams must be a positive integer (batches decoded at once), got {streams!r}")
    return streams


def threads_per_stream(threads: int | None, streams: int) -> int | None:
    """Intra-op threads of each stream: `threads` (None: every core) shared out, at least one. With one stream,
    `threads` as given (None: the engine's own default)."""
    if check_streams(streams) == 1:
        return threads
    return max(1, (threads or os.cpu_count() or 1) // streams)


def auto_streams(threads: int | None, batches: int) -> int:
    """The throughput default: one stream per thread (`threads`, None: every core), no more than there are batches."""
    return max(1, min(threads or os.cpu_count() or 1, batches))


def translate_batches(translator, batches: Sequence[Sequence[str]], **generate_kwargs) -> list[tuple]:
    """`translator.translate_with_report(batch, **generate_kwargs)` for every batch, in order, `translator.streams`
    batches at a time (module doc): a list of (translations, too long, at limit) per batch. An exception in a batch
    (or KeyboardInterrupt) propagates once the batches already running end; the others are not started."""
    streams = min(getattr(translator, "streams", 1), len(batches))
    if streams <= 1:
        return [translator.translate_with_report(list(batch), **generate_kwargs) for batch in batches]
    pool = ThreadPoolExecutor(max_workers=streams, thread_name_prefix="xlpe-stream")
    try:
        return list(pool.map(lambda batch: translator.translate_with_report(list(batch), **generate_kwargs), batches))
    finally:  # an error or Ctrl-C: the batches not started are dropped, not translated before it propagates
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["auto_streams", "check_streams", "threads_per_stream", "translate_batches"]
