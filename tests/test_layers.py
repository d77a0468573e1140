"""The package layout's rules (ARCHITECTURE.md), checked on the source:

* layers, low to high: models < features < evaluation < training < cli; a module imports only its own layer
  or lower ones (lazy imports inside functions count too), and nothing imports in a circle;
* `xlpe/models/` is Hub remote code: flat files whose xlpe imports are single-dot siblings only;
* every module opens with a docstring saying what it owns; a module over ~400 lines is split into sections.
The checker itself is tested on made-up graphs, so a green run means the rules hold, not that nothing was looked at.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xlpe"
LAYERS = {"models": 0, "features": 1, "evaluation": 2, "export": 2, "training": 3, "cli": 4}
TOP = len(LAYERS)  # xlpe/__init__.py and the deprecation shim: above every layer
SECTION_BANNER = "# " + "-" * 40  # the start of a `# ----...` section banner


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(xlpe module, level of the relative import or 0) for every import in the file, at any depth."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names if alias.name.split(".")[0] == "xlpe"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "xlpe":
                target = node.module
            else:
                continue
            for alias in node.names:  # `from pkg import module` names a module; `from module import name` not
                candidate = f"{target}.{alias.name}"
                found.append((candidate if candidate in known else target, node.level))
    return [(module, level) for module, level in found if module in known]


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: {m for m, _ in imported_modules(name, path, known)} - {name} for name, path in modules.items()}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], TOP) if len(parts) > 1 else TOP


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


# ---------------------------------------------------------------------------------------------------------
# The checker, on made-up graphs
# ---------------------------------------------------------------------------------------------------------


def test_checker_finds_an_upward_import_and_a_cycle():
    graph = {
        "xlpe.models.a": {"xlpe.training.b"},
        "xlpe.training.b": {"xlpe.features.c"},
        "xlpe.features.c": {"xlpe.features.d"},
        "xlpe.features.d": {"xlpe.features.c"},
    }
    assert upward_imports(graph) == ["xlpe.models.a -> xlpe.training.b"]
    assert cycles(graph) == [["xlpe.features.c", "xlpe.features.d"]]
    assert cycles({"xlpe.cli.a": {"xlpe.training.b"}, "xlpe.training.b": set()}) == []


def test_checker_reads_relative_lazy_and_module_imports(tmp_path, monkeypatch):
    package = tmp_path / "xlpe"
    (package / "training").mkdir(parents=True)
    (package / "features").mkdir()
    for path in ("__init__.py", "training/__init__.py", "features/__init__.py", "features/prepare.py"):
        (package / path).write_text('"""x"""\n')
    (package / "training" / "run.py").write_text('"""x"""\ndef f():\n    from ..features import prepare\n')
    (package / "features" / "tagging.py").write_text('"""x"""\nfrom xlpe.training.run import f\n')
    monkeypatch.setattr(__import__(__name__), "PACKAGE", package)
    graph = import_graph()
    assert graph["xlpe.training.run"] == {"xlpe.features.prepare"}  # lazy, relative, names a module
    assert upward_imports(graph) == ["xlpe.features.tagging -> xlpe.training.run"]


# ---------------------------------------------------------------------------------------------------------
# The package
# ---------------------------------------------------------------------------------------------------------


def test_every_module_belongs_to_a_layer():
    strays = [name for name in all_modules() if layer(name) == TOP and name != "xlpe"]
    assert not strays, f"modules outside {sorted(LAYERS)}: {strays}"


def test_no_upward_import_and_no_cycle():
    graph = import_graph()
    assert upward_imports(graph) == []
    assert cycles(graph) == []


def test_models_are_flat_hub_code():
    modules, known = all_modules(), set(all_modules())
    for name, path in modules.items():
        if not name.startswith("xlpe.models.") or path.name == "__init__.py":
            continue
        for module, level in imported_modules(name, path, known):
            assert level == 1 and module.rpartition(".")[0] == "xlpe.models", (
                f"{path.name} imports {module}: remote code may only import its siblings, as `from .x import y`"
            )


@pytest.mark.parametrize("name", sorted(all_modules()))
def test_module_docstring_and_size(name):
    path = all_modules()[name]
    text = path.read_text(encoding="utf-8")
    assert ast.get_docstring(ast.parse(text)), f"{path} has no module docstring saying what it owns"
    lines = text.count("\n")
    if lines > 450:  # no module over ~450 lines unless sectioned
        assert text.count(SECTION_BANNER) >= 3, f"{path}: {lines} lines and no sections"


# ---------------------------------------------------------------------------------------------------------
# Console scripts (the 0.1 flat layout's module paths are gone)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("old", ["xlpe.train_args", "xlpe.modeling_dpe", "xlpe.prepare"])
def test_the_old_flat_module_paths_are_gone(old):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def console_scripts() -> dict[str, str]:
    import configparser

    config = configparser.ConfigParser()
    config.read(PACKAGE.parent / "setup.cfg")
    lines = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(line.replace(" ", "").split("=", 1) for line in lines)


def test_every_console_script_points_at_a_cli_function():
    import importlib

    scripts = console_scripts()
    assert set(scripts) == {
        "xlpe-prepare",
        "xlpe-train",
        "xlpe-translate",
        "xlpe-evaluate",
        "xlpe-push",
        "xlpe-demo",
        "xlpe-reorder",
        "xlpe-tagger",
        "xlpe-export",
        "xlpe-compare",
    }
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert module.startswith("xlpe.cli."), f"{name} -> {target}: console scripts live in xlpe.cli"
        assert callable(getattr(importlib.import_module(module), function))


def test_every_console_script_help_runs():
    """`python -m <module> --help` of every console script, side by side (each pays the torch import)."""
    import subprocess
    import sys

    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", target.partition(":")[0], "--help"],
            cwd=PACKAGE.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, target in console_scripts().items()
    }
    for name, process in processes.items():
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0 and "usage:" in out, f"{name}: {err[-2000:]}"
