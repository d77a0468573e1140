# Stand-in for transformers' tests/exporters/test_export.py (see ../README.md: not vendored).
"""Import shim: `ModelTesterMixin` derives from `ExportTesterMixin` and `GenerationTesterMixin` from
`ExportGenerateTesterMixin`, whose tests (torch.export / ONNX / ExecuTorch exporters, also of `generate`) are not
vendored; these empty bases let both modules import."""


class ExportTesterMixin:
    """Empty base (the upstream mixin's export tests are not vendored, see ../README.md)."""


class ExportGenerateTesterMixin(ExportTesterMixin):
    """Empty base (upstream's export-of-`generate` tests are not vendored, see ../README.md)."""
