"""Every module path and `module.name` reference in the package's docstrings and comments and in the docs resolves.

Checked in the comments and string literals of `xlpe/**/*.py` and in README.md, ARCHITECTURE.md, CONTRIBUTING.md
and `docs/**/*.md`:

* `xlpe.a.b.name` (a dotted path under the package; not an entry-point group the package declares, such as
  `xlpe.taggers`): the longest prefix that is a module must exist, and the next
  part must be a name defined at its top level (a def, a class, an assignment, an import) or a submodule; one
  more part after a class must be defined in that class's body;
* `xlpe/a/b.py` (a file path under the package) must exist; so must a Python file named bare (`sinusoid.py`)
  somewhere in the repository;
* `module.name` for a module of the package named in full (`seq2seq_scaffold.weight_by_global_tokens`, not
  `data.x`, whose prefix is as often a variable): resolved as above in every module of that name.

The checker itself is tested on made-up text, so a green run means the references hold, not that none was found.
"""

from __future__ import annotations

import ast
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "xlpe"
DOCS = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "docs"]

DOTTED = re.compile(r"(?<![\w./-])xlpe((?:\.[A-Za-z_]\w*)+)")
FILE_PATH = re.compile(r"(?<![\w./-])xlpe/([\w/]+\.py)\b")
BARE_FILE = re.compile(r"(?<![\w./-])(\w+\.py)\b")
MODULE_ATTR = re.compile(r"(?<![\w./-])([a-z_]\w*)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?")
# file suffixes (`corpus.de`, `hyp.en`): not names
NOT_NAMES = {"py", "md", "json", "jsonl", "txt", "yaml", "yml", "csv", "toml", "cfg", "sh", "ipynb", "log", "out"}
NOT_NAMES |= {"de", "en", "fr", "zh", "ja", "ro", "cs", "tok", "bpe", "src", "tgt", "ref", "hyp"}
# module base names that are as often a variable or a word (`data.x`, `plan.steps`): checked only as `xlpe.` paths
COMMON_WORDS = {
    "arguments",
    "artefacts",
    "cache",
    "callbacks",
    "corpus",
    "data",
    "demo",
    "errors",
    "evaluate",
    "manifest",
    "metrics",
    "plan",
    "plots",
    "prepare",
    "push",
    "recipes",
    "reorder",
    "reorderer",
    "reuse",
    "run",
    "sampling",
    "tagger",
    "train",
    "translate",
    "trainer",
    "two_pass",
}
EXTERNAL_FILES = {"run_translation.py"}  # transformers' example script, compared with in the docs
# where an old path is the point: the deprecation shim, deprecation messages, logger names ("xlpe.train")
SKIPPED_FILES: set[str] = set()
DEPRECATION_WORDS = re.compile(r"deprecat|\bold\b|moved to|renamed", re.IGNORECASE)


def module_file(parts: tuple[str, ...], root: Path = PACKAGE) -> Path | None:
    """The file of module xlpe.<parts> (a .py file or a package's __init__.py), or None."""
    path = root.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


@cache
def top_level_names(path: Path) -> dict[str, ast.AST | None]:
    """Names defined at the top level of a module: defs and classes (with their nodes), assignments, imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, ast.AST | None] = {}
    for node in ast.walk(tree) if path.name == "__init__.py" else tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names.setdefault(name.id, None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], None)
    if path.name == "__init__.py":  # lazily exported names (PEP 562 tables) count as defined
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                names.setdefault(node.value, None)
    return names


def class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(item.name)
        elif isinstance(item, ast.Name):
            members.add(item.id)
        elif isinstance(item, ast.Attribute):
            members.add(item.attr)
        elif isinstance(item, ast.arg):
            members.add(item.arg)
    return members


def resolves_in(path: Path, rest: list[str]) -> bool:
    """`rest` (name, optional member) is defined in the module at `path`."""
    if not rest:
        return True
    names = top_level_names(path)
    if rest[0] not in names:
        return module_file((*path.relative_to(PACKAGE).parent.parts, rest[0])) is not None and path.name == (
            "__init__.py"
        )
    node = names[rest[0]]
    if len(rest) > 1 and isinstance(node, ast.ClassDef) and rest[1] not in NOT_NAMES:
        return rest[1] in class_members(node)
    return True


def dotted_resolves(dotted: str, root: Path = PACKAGE) -> bool:
    """`dotted` = ".a.b.name..." after `xlpe`."""
    parts = [part for part in dotted.split(".") if part]
    if parts and (len(parts[-1]) == 1 and parts[-1].isupper()):  # a placeholder: `xlpe.cli.X`
        return True
    if parts and parts[-1] in NOT_NAMES:  # `xlpe.models.x.py`-like file names written with dots
        parts = parts[:-1]
    for cut in range(len(parts), -1, -1):
        path = module_file(tuple(parts[:cut]), root)
        if path is not None:
            return resolves_in(path, parts[cut:]) if root == PACKAGE else True
    return False


@cache
def entry_point_groups() -> set[str]:
    """Entry-point group names the package declares (`ENTRY_POINT_GROUP = "xlpe.taggers"`): dotted, not modules."""
    groups = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
                if any("ENTRY_POINT" in name for name in names) and isinstance(node.value.value, str):
                    groups.add(node.value.value)
    return groups


@cache
def python_file_names() -> set[str]:
    """Base names of the repository's Python files (the package, tests, bench, scripts, examples, docs)."""
    folders = [ROOT / name for name in ("xlpe", "tests", "bench", "scripts", "examples", "docs")]
    found = {path.name for folder in folders for path in folder.rglob("*.py")} | {p.name for p in ROOT.glob("*.py")}
    return found | EXTERNAL_FILES


@cache
def modules_by_name() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__init__.py":
            found.setdefault(path.stem, []).append(path)
    return found


def module_attr_resolves(module: str, name: str, member: str | None) -> bool | None:
    """None when `module` is no module of the package (or a common word); else whether `module.name` resolves."""
    paths = modules_by_name().get(module)
    if not paths or module in COMMON_WORDS or name in NOT_NAMES:
        return None
    rest = [name] + ([member] if member else [])
    return any(resolves_in(path, rest) for path in paths)


def stale_in(text: str) -> list[str]:
    """The references in `text` (one line) that do not resolve; none in a line about deprecated or old names."""
    stale = []
    if DEPRECATION_WORDS.search(text):
        return stale
    for match in DOTTED.finditer(text):
        if match.group(0) not in entry_point_groups() and not dotted_resolves(match.group(1)):
            stale.append(match.group(0))
    for match in FILE_PATH.finditer(text):
        if not (PACKAGE / match.group(1)).is_file():
            stale.append(match.group(0))
    for match in BARE_FILE.finditer(text):
        if match.group(1) not in python_file_names():
            stale.append(match.group(0))
    for match in MODULE_ATTR.finditer(text):
        if module_attr_resolves(*match.groups()) is False:
            stale.append(match.group(0))
    return stale


def python_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every line of every comment and string literal of a Python file, but logger names."""
    found, previous = [], []
    with open(path, encoding="utf-8") as handle:
        for token in tokenize.generate_tokens(handle.readline):
            prose = token.type in (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1))
            if prose and [t.string for t in previous[-2:]] != ["getLogger", "("]:
                found += [(token.start[0] + i, line) for i, line in enumerate(token.string.splitlines())]
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                previous = (previous + [token])[-2:]
    return found


def checked_files() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    for entry in DOCS:
        path = ROOT / entry
        files += sorted(path.rglob("*.md")) if path.is_dir() else [path]
    return files


def stale_references() -> list[str]:
    """'path:line: reference' for every reference that does not resolve."""
    found = []
    for path in checked_files():
        if str(path.relative_to(ROOT)) in SKIPPED_FILES:
            continue
        if path.suffix == ".py":
            pieces = python_prose(path)
        else:
            pieces = list(enumerate(path.read_text(encoding="utf-8").splitlines(), start=1))
        for line, text in pieces:
            for reference in stale_in(text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {reference}")
    return found


# ---------------------------------------------------------------------------------------------------------
# The checker on made-up text, then on the tree
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, stale",
    [
        ("see `xlpe.models.seq2seq_scaffold.weight_by_global_tokens`", []),
        ("see `xlpe.models.seq2seq_scaffold.no_such_function`", ["xlpe.models.seq2seq_scaffold.no_such_function"]),
        ("as prepared by `xlpe.reordering.dpe_target_positions`", ["xlpe.reordering.dpe_target_positions"]),
        ("the layout of `xlpe/sinusoid.py`", ["xlpe/sinusoid.py"]),
        ("the layout of `xlpe/models/sinusoid.py`", []),
        ("see strategies_of_old.py", ["strategies_of_old.py"]),
        ("(seq2seq_scaffold.touch_parameters)", []),
        ("(seq2seq_scaffold.SelfInitialisingModulesMixin)", ["seq2seq_scaffold.SelfInitialisingModulesMixin"]),
        ("`hub_support.HubModelMixin.save_pretrained`", []),
        ("`hub_support.HubModelMixin.no_such_method`", ["hub_support.HubModelMixin.no_such_method"]),
        ("data.foo and plan.steps are variables; modeling_xlpe.py is a file", []),
        ("`xlpe.models` and `import xlpe` and xlpe-train; `xlpe.cli.X`; --hyp xlpe.de", []),
        ("old paths (`xlpe.prepare`) still import", []),
    ],
)
def test_checker_on_made_up_text(text, stale):
    assert stale_in(text) == stale


def test_every_module_path_and_reference_resolves():
    stale = stale_references()
    assert not stale, "references to module paths or names that do not exist:\n" + "\n".join(stale)
