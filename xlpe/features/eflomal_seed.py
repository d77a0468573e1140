"""Seeded eflomal: the same corpus, options and seed give the same links (`eflomal_options={"seed": N}`).

eflomal has no seed option: its binary seeds every sampler from `/dev/urandom` and runs the samplers (and the
two directions) in OpenMP threads, so two alignments of one corpus differ (an oracle that changes with each
preparation, docs/benchmarks/preparation.md "Oracle stability"). A seeded alignment runs the same binary, with the same
arguments, under three changes:

* a tiny preloaded library (`SEED_LIBRARY_SOURCE`, built once with the system C compiler into the user cache)
  answers the binary's `fopen("/dev/urandom")` with a SplitMix64 stream of the seed (one stream per open, in
  order); every other file opens as usual;
* `OMP_NUM_THREADS=1`: a direction's samplers run one after another, so their draws come in a fixed order;
* the two directions run as two processes side by side (eflomal's `-f` / `-r` alone), so two cores are still
  used: on 2 cores about as fast as the unseeded default; on more cores slower (2 threads instead of
  2 x `n_samplers`).

The environment reaches only the eflomal processes (a per-thread stand-in for the `subprocess` module inside
`eflomal.cython`), never this process or other children. Linux (LD_PRELOAD) with a C compiler (`$CC`, `cc` or
`gcc`); elsewhere a seed is refused with a ValueError that says so.

Never a silently unseeded run: LD_PRELOAD splits its value at spaces and colons and the dynamic linker only warns
(on the child's stderr) when it cannot preload, so the library lives where its path has neither (the user cache
when it qualifies, else a private folder under the temporary directory), and the library's constructor touches the
file named by `XLPE_EFLOMAL_SEED_MARK`: an eflomal process that ran without it (the library not preloaded) is a
ValueError naming the library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SEED_VARIABLE = "XLPE_EFLOMAL_SEED"
MARK_VARIABLE = "XLPE_EFLOMAL_SEED_MARK"  # the library's constructor creates this file: proof it was preloaded

SEED_LIBRARY_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* xlpe: answers fopen("/dev/urandom") with a SplitMix64 stream of $XLPE_EFLOMAL_SEED (the n-th open gets the
   n-th stream); any other fopen is the C library's. */
static uint64_t opens;

/* proof of loading: create the file $XLPE_EFLOMAL_SEED_MARK names (the caller refuses a run without it) */
__attribute__((constructor)) static void xlpe_mark_loaded(void) {
    const char *mark = getenv("XLPE_EFLOMAL_SEED_MARK");
    if (mark && *mark) {
        int fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) close(fd);
    }
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*next_fopen)(const char *, const char *);
    if (!next_fopen) next_fopen = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    const char *seed = getenv("XLPE_EFLOMAL_SEED");
    if (!seed || !path || strcmp(path, "/dev/urandom") != 0) return next_fopen(path, mode);
    uint64_t state = strtoull(seed, NULL, 10) * 0x9E3779B97F4A7C15ULL
                     + 0xD1B54A32D192ED03ULL * (__atomic_fetch_add(&opens, 1, __ATOMIC_SEQ_CST) + 1);
    size_t size = 4096;
    unsigned char *bytes = malloc(size);
    if (!bytes) return NULL;
    for (size_t i = 0; i < size; i += 8) {
        uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        memcpy(bytes + i, &z, 8);
    }
    return fmemopen(bytes, size, "rb");
}
"""

_build_lock = threading.Lock()
_local = threading.local()


def check_seed(seed) -> int:
    """The seed as an int in [0, 2^63), or a ValueError naming the option."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"eflomal_options seed must be an integer in [0, 2^63), got {seed!r}")
    return seed


def seed_library() -> str:
    """Path of the preloaded library, built on first use into $XDG_CACHE_HOME/xlpe (default ~/.cache/xlpe), or,
    when that path holds a character LD_PRELOAD splits at (a space, a colon), into a private folder under the
    temporary directory (`_library_folder`)."""
    if not sys.platform.startswith("linux"):
        raise ValueError(
            f"a seeded eflomal alignment (eflomal_options seed) needs Linux (LD_PRELOAD); this is {sys.platform}"
        )
    digest = hashlib.sha256(SEED_LIBRARY_SOURCE.encode()).hexdigest()[:12]
    cache = _library_folder()
    library = cache / f"eflomal-seed-{digest}.so"
    with _build_lock:
        if library.is_file():
            return str(library)
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not compiler:
            raise ValueError(
                "a seeded eflomal alignment (eflomal_options seed) builds a 1-page C library once: "
                "no C compiler found (set CC, or install cc/gcc), or leave the seed out"
            )
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as build:
            source, output = Path(build) / "seed.c", Path(build) / "seed.so"
            source.write_text(SEED_LIBRARY_SOURCE)
            try:
                result = subprocess.run(
                    [compiler, "-O2", "-shared", "-fPIC", "-o", str(output), str(source), "-ldl"],
                    capture_output=True,
                    text=True,
                )
            except OSError as error:
                raise ValueError(
                    f"building the eflomal seed library: cannot run the C compiler {compiler!r} ({error.strerror})"
                ) from None
            if result.returncode != 0:
                raise ValueError(
                    f"building the eflomal seed library with {compiler} failed: {result.stderr.strip()[-500:]}"
                )
            os.replace(output, library)  # atomic: concurrent builders (shard workers) agree
    return str(library)


def _preloadable(path: Path) -> bool:
    """Can LD_PRELOAD name `path`? It splits at spaces and colons (and a value is one line)."""
    return not any(c.isspace() or c == ":" for c in str(path))


def _library_folder() -> Path:
    """Where the library is built: the user cache when LD_PRELOAD can name a file there, else
    <tmp>/xlpe-eflomal-seed-<uid> (made private: 0700, ours), else a ValueError saying what to change."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").absolute() / "xlpe"
    if _preloadable(cache):
        return cache
    private = Path(tempfile.gettempdir()).absolute() / f"xlpe-eflomal-seed-{os.getuid()}"
    if not _preloadable(private):
        raise ValueError(
            f"a seeded eflomal alignment preloads a library (LD_PRELOAD), whose path cannot hold a space or "
            f"a colon: neither {cache} nor {private} qualifies; set XDG_CACHE_HOME or TMPDIR to a "
            "folder without them"
        )
    private.mkdir(mode=0o700, exist_ok=True)
    status = private.lstat()
    if not private.is_dir() or private.is_symlink() or status.st_uid != os.getuid() or status.st_mode & 0o022:
        raise ValueError(
            f"a seeded eflomal alignment builds its library in {private} (the cache path {cache} holds a "
            "space or a colon), and that folder is not a private directory of this user; set "
            "XDG_CACHE_HOME to a folder without spaces or colons"
        )
    return private


def seeded_environment(seed: int) -> dict[str, str]:
    """What an eflomal process needs to draw from `seed`."""
    return {"LD_PRELOAD": seed_library(), SEED_VARIABLE: str(check_seed(seed)), "OMP_NUM_THREADS": "1"}


class _SubprocessForThisThread:
    """Stands in for `subprocess` inside `eflomal.cython`: `run` adds this thread's eflomal environment."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def run(self, *args, **kwargs):
        extra = getattr(_local, "environment", None)
        if not extra:
            return subprocess.run(*args, **kwargs)
        with tempfile.TemporaryDirectory(prefix="xlpe-seed-mark-") as folder:
            mark = os.path.join(folder, "loaded")
            kwargs["env"] = {**(kwargs.get("env") or os.environ), **extra, MARK_VARIABLE: mark}
            result = subprocess.run(*args, **kwargs)
            if not os.path.exists(mark):  # the dynamic linker ignored LD_PRELOAD (it only warns): not seeded
                raise ValueError(
                    f"seeded eflomal: the process did not load the seed library {extra['LD_PRELOAD']} "
                    "(LD_PRELOAD ignored: a missing or foreign library?), so its links are not "
                    "reproducible; delete the library to have it built again, or leave the seed out"
                )
        return result


def _install() -> None:
    import eflomal.cython

    if not isinstance(eflomal.cython.subprocess, _SubprocessForThisThread):
        eflomal.cython.subprocess = _SubprocessForThisThread()


def align_seeded(seed: int, **align_arguments) -> None:
    """`eflomal.cython.align(**align_arguments)` drawing from `seed`: the forward and the reverse direction as two
    single-threaded processes side by side (each direction's stream starts from the seed; the two models are
    independent, so this is eflomal's alignment, reproducible)."""
    import eflomal.cython

    environment = seeded_environment(seed)
    _install()
    errors: list[BaseException] = []

    def one_direction(name: str) -> None:
        _local.environment = environment
        try:
            eflomal.cython.align(
                **{
                    **align_arguments,
                    "links_filename_fwd": None,
                    "links_filename_rev": None,
                    name: align_arguments[name],
                }
            )
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(error)
        finally:
            _local.environment = None

    threads = [
        threading.Thread(target=one_direction, args=(name,))
        for name in ("links_filename_fwd", "links_filename_rev")
        if align_arguments.get(name)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


__all__ = ["SEED_LIBRARY_SOURCE", "align_seeded", "check_seed", "seed_library", "seeded_environment"]
