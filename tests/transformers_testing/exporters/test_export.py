# Stand-in for transformers' tests/exporters/test_export.py (see ../README.md: not obtainable at v5.23.0 here).
"""Import shim: `ModelTesterMixin` derives from `ExportTesterMixin`, whose tests (torch.export / ONNX /
OpenVINO / ExecuTorch / TensorRT exporters) are not vendored; this empty base lets the module import."""


class ExportTesterMixin:
    """Empty base (the upstream mixin's export tests are not vendored, see ../README.md)."""
