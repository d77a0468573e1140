"""Old module paths of the flat 0.1 layout, kept importable for one release with a DeprecationWarning.

`import xlpe.prepare` (or `from xlpe.modeling_xlpe import ...`) finds the module at its new path, warns once,
and binds the old name to the *same* module object in `sys.modules`, so attributes, monkeypatches and
`isinstance` checks behave exactly as with the new path. Remove this file (and its import in `__init__.py`)
in the release after 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {  # old name (under xlpe.) -> new name (under xlpe.)
    **{
        name: f"models.{name}"
        for name in (
            "configuration_xlpe",
            "modeling_xlpe",
            "configuration_dpe",
            "modeling_dpe",
            "configuration_mvpe_pos",
            "modeling_mvpe_pos",
            "seq2seq_scaffold",
            "extra_inputs",
            "sinusoid",
            "hub_support",
            "pipeline_translation",
            "tag_sets",
            "pos_tagging_hub",
            "reorder_predictor",
            "registry",
        )
    },
    **{
        name: f"features.{name}"
        for name in ("alignment", "reordering", "tagging", "tokenization", "synthetic", "prepare")
    },
    **{
        name: f"training.{name}"
        for name in ("trainer", "collator", "checkpoint_averaging", "model_card", "push", "demo")
    },
    "train": "cli.train",
    "train_args": "training.arguments",
    "train_data": "training.data",
    "alignment_quality": "evaluation.alignment_quality",
    "plots": "evaluation.plots",
    "two_pass": "evaluation.two_pass",
    "evaluate_cli": "cli.evaluate",
    "translate": "cli.translate",
}
# `xlpe.evaluation` was a module and is now a package that re-exports the same functions: no alias needed.


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, new_name: str):
        self.new_name = new_name

    def create_module(self, spec):
        warnings.warn(
            f"{spec.name} moved to {self.new_name}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(self.new_name)

    def exec_module(self, module):  # the new module is already executed
        pass

    def is_package(self, fullname) -> bool:
        return False

    def get_code(self, fullname):  # `python -m xlpe.<old>`: run the new module as __main__
        return compile(
            f"import runpy, warnings\nwarnings.warn('{fullname} moved to {self.new_name}', DeprecationWarning)\n"
            f"runpy.run_module('{self.new_name}', run_name='__main__', alter_sys=True)\n",
            f"<{fullname}: moved to {self.new_name}>",
            "exec",
        )


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package != __package__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(f"{__package__}.{MOVED[name]}"))


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())  # before any finder that knows the old files
