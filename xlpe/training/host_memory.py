"""Keep freed host memory in the process during CPU training (glibc's malloc), so a step does not page-fault.
`xlpe-export --translate` does the same for the export's decoding steps (fresh cache arrays each step).

A CPU train step allocates and frees the same large tensors every step (the logits, their log-softmax and
gradients: 32 x 24 x 8000 floats = 25 MB each at bench/speed.py's `small` dims). With glibc's defaults a freed
block at the top of the heap is returned to the kernel once more than M_TRIM_THRESHOLD is free there, and blocks
above the (self-adjusting) M_MMAP_THRESHOLD are unmapped on free; either way the next step's tensor is fresh
memory that the kernel must zero page by page on first touch. Whether that happens depends on the order of the
step's allocations, so two models with the same large tensors can differ by 5-10 % for no reason of their own
(docs/benchmarks/speed.md, "The host allocator").

`keep_freed_host_memory()` fixes both thresholds with `mallopt`: blocks up to 32 MiB (glibc's own upper default on
64-bit) come from the heap, and the heap is not trimmed. Freed memory is then reused by the next step; the
resident size stays at the step's peak, which the step reaches again anyway. Nothing else changes: the values
computed are the same. It is skipped where it cannot apply or the user chose: not glibc, a preloaded allocator
(jemalloc, tcmalloc, mimalloc), a `MALLOC_*` tuning variable already set, or XLPE_HOST_ALLOCATOR=default.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes an int: never trim below 2 GiB of free heap top
OPT_OUT = "XLPE_HOST_ALLOCATOR"  # "default": leave the allocator as it is
USER_TUNING = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")

_applied: str | None = None  # what the first call decided (the line it returned)


def reason_to_skip(environ=None, platform: str | None = None) -> str | None:
    """Why the allocator is left alone here (None: it can be tuned)."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ.get(OPT_OUT, "").strip().lower() == "default":
        return f"{OPT_OUT}=default"
    if not platform.startswith("linux"):
        return f"not Linux ({platform})"
    preload = environ.get("LD_PRELOAD", "")
    for name in OTHER_ALLOCATORS:
        if name in preload:
            return f"{name} preloaded"
    for name in USER_TUNING:
        if name in environ:
            return f"{name} set by the user"
    return None


def keep_freed_host_memory() -> str:
    """Tune glibc's malloc as described above (once per process); returns one line saying what was done."""
    global _applied
    if _applied is not None:
        return _applied
    skip = reason_to_skip()
    if skip is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # musl and others: no mallopt
            skip = "no glibc mallopt"
        else:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            if (
                mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1
                or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) != 1
            ):
                skip = "mallopt refused"
    _applied = (
        f"host allocator: glibc keeps freed memory (blocks <= {MMAP_THRESHOLD_BYTES >> 20} MiB from the heap, no "
        f"trimming; {OPT_OUT}=default turns it off)"
        if skip is None
        else f"host allocator: left as it is ({skip})"
    )
    return _applied
