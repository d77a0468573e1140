"""The MFU peak table: exact device names (no substring matches), MIG slices scaled by their SMs or
left without a peak, and the peak of the run's math mode (bf16/fp16, tf32, fp32) — with fake device names and
properties, on CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import MarianConfig

from xlpe.training import throughput
from xlpe.training.throughput import GPU_PEAKS, TrainingReport, canonical_gpu_name, device_peak, math_mode, peak_tflops


@pytest.mark.parametrize(
    "name, part",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100 SXM"),
        ("nvidia h100 80gb hbm3", "H100 SXM"),
        ("NVIDIA A10G", None),
        ("NVIDIA L4000", None),
        ("NVIDIA GeForce RTX 4090", None),
        ("Tesla V100-SXM2-16GB", None),
        ("", None),
        (None, None),
    ],
)
def test_names_map_to_exactly_one_part(name, part):
    assert canonical_gpu_name(name) == part


def test_l40_is_not_the_l4_and_every_entry_names_itself():
    assert (
        peak_tflops("NVIDIA L40") == 181.0 and peak_tflops("NVIDIA L4") == 121.0 and peak_tflops("NVIDIA L40S") == 362.0
    )
    for part in GPU_PEAKS:  # each key is reachable from a name CUDA could report, and only itself
        assert canonical_gpu_name(f"NVIDIA {part}") == part
    assert throughput.PEAK_DENSE_BF16_TFLOPS["H100 SXM"] == 989.4


def test_the_peak_follows_the_math_mode():
    name = "NVIDIA H100 80GB HBM3"
    assert [peak_tflops(name, mode) for mode in ("bfloat16", "float16", "tf32", "float32")] == [
        989.4,
        989.4,
        494.7,
        66.9,
    ]
    assert math_mode(bf16=True) == "bfloat16" and math_mode(fp16=True) == "float16"
    assert math_mode(tf32=True) == "tf32" and math_mode(tf32=False) == "float32"
    peak, why = device_peak("NVIDIA B200", "float32")
    assert peak is None and "no dense float32 peak" in why
    with pytest.raises(ValueError, match="math mode 'int8'"):
        device_peak(name, "int8")


def test_a_mig_slice_gets_its_share_of_the_sms_or_no_peak():
    peak, why = device_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bfloat16", multi_processor_count=16)
    assert peak == round(989.4 * 16 / 132, 1) and "16/132 SMs" in why
    # a slice named like the whole GPU (older drivers) is caught by its SM count
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "bfloat16", multi_processor_count=14) == round(312.0 * 14 / 108, 1)
    peak, why = device_peak("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "bfloat16")
    assert peak is None and "MIG slice" in why and "SM count is unknown" in why
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16", multi_processor_count=132) == 989.4  # the whole part


def test_the_throughput_meter_looks_up_the_run_s_mode_and_slice(monkeypatch):
    """on_train_begin on a (fake) CUDA device: an fp32 run without tf32 is measured against the fp32 peak, a
    bf16 run against the bf16 peak, a MIG slice against its share; `train_mfu_peak` says which."""
    config = MarianConfig(
        d_model=32, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100
    )
    properties = SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    cuda = SimpleNamespace(type="cuda")
    for flags, expected in (({"bf16": True}, 989.4), ({"tf32": False}, 66.9), ({"tf32": True}, 494.7)):
        meter = TrainingReport(config)
        meter.on_train_begin(SimpleNamespace(device=cuda, world_size=1, **flags), None, None)
        assert meter.peak == expected
        meter.interval(1000, 800)
        meter.on_train_end(None, None, None)
        totals = meter.totals(2000, 1600, fallback_seconds=1.0)
        assert totals["train_mfu_peak_tflops"] == expected and "H100 SXM" in totals["train_mfu_peak"]
    properties.multi_processor_count, properties.name = 16, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    meter = TrainingReport(config)
    meter.on_train_begin(SimpleNamespace(device=cuda, world_size=1, bf16=True), None, None)
    assert meter.peak == round(989.4 * 16 / 132, 1) and "MIG" in meter.peak_source
    properties.name = "NVIDIA L40"
    properties.multi_processor_count = 142
    meter = TrainingReport(config)
    meter.on_train_begin(SimpleNamespace(device=cuda, world_size=1, bf16=True), None, None)
    assert meter.peak == 181.0
