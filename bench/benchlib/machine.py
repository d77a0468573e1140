"""What a CPU timing ran on: the processor's name and the vector instructions its int8 and fp32 kernels can use
(onnxruntime, CTranslate2 and PyTorch pick kernels by them, so a ratio measured with AVX-512 VNNI need not hold on
an AVX2-only machine). Read from /proc/cpuinfo; "unknown CPU" where it cannot be read."""

from __future__ import annotations

import contextlib
import json
import os
from datetime import date
from pathlib import Path

# the instruction sets that change which int8 / fp32 matrix kernels run, best first
KERNEL_INSTRUCTIONS = ("amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2")


def cpu_description() -> str:
    """E.g. "2 cores, AMD EPYC (int8/fp32 kernels: avx2)": name, core count and the best-known instruction sets."""
    name, flags = "unknown CPU", set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == "unknown CPU":
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    present = [flag for flag in KERNEL_INSTRUCTIONS if flag in flags] or ["none of " + "/".join(KERNEL_INSTRUCTIONS)]
    return f"{os.cpu_count()} cores, {name} (int8/fp32 kernels: {', '.join(present)})"


def write_record(path, script: str, argv, **fields) -> dict:
    """A bench's JSON record: date, the command that made it (`python <script> <argv>`), the CPU, then `fields`;
    written to `path` when given (None: only returned)."""
    record = {
        "date": date.today().isoformat(),
        "command": " ".join(["python", script, *argv]),
        "cpu": cpu_description(),
        **fields,
    }
    if path:
        Path(path).write_text(json.dumps(record, indent=1) + "\n")
    return record
