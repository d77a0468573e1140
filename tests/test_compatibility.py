"""The transformers range the package accepts is the range CI tests, and a release outside it is said at import.

setup.cfg's `install_requires` is the one statement of the range; everything else is checked against it: the
`test` extra pins its lower bound (the README's test command runs the whole suite there), .ci/newest-transformers
installs its upper bound, tests/transformers_testing/ vendors upstream's model tests for both, and the README's
compatibility table quotes it."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from packaging.requirements import Requirement
from packaging.version import Version

import xlpe


def _setup_cfg():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    return config


def _requirement(lines: str, name: str) -> Requirement:
    return next(Requirement(line.strip()) for line in lines.splitlines() if line.strip().startswith(name))


def accepted() -> Requirement:
    return _requirement(_setup_cfg()["options"]["install_requires"], "transformers")


def test_accepted_range_is_the_tested_range():
    from transformers_testing import VENDORED_RELEASES

    specifier = accepted().specifier
    bounds = {spec.operator: Version(spec.version) for spec in specifier}
    assert set(bounds) == {">=", "<="}, f"transformers needs a tested lower bound and a '<=' upper bound: {specifier}"
    pinned = _requirement(_setup_cfg()["options.extras_require"]["test"], "transformers").specifier
    assert str(pinned) == f"=={bounds['>=']}", "the `test` extra pins the lower bound: the whole suite runs there"
    assert Version(max(VENDORED_RELEASES, key=Version)) == bounds["<="], (
        "upstream's tests of the newest release are vendored"
    )
    assert {str(bounds[">="]), str(bounds["<="])} <= set(VENDORED_RELEASES)
    assert all(specifier.contains(release) for release in VENDORED_RELEASES)
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`>={bounds['>=']},<={bounds['<=']}`" in readme, "README's compatibility table quotes the range"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "bash .ci/newest-transformers" in ci, "CI runs the second environment"


@pytest.mark.parametrize(
    "installed, warns",
    [("5.23.0", False), ("5.24.0", False), ("5.17.0", True), ("5.24.1", True), ("6.0.0", True), ("5.25.0rc1", True)],
)
def test_untested_release_is_one_line(installed, warns):
    message = xlpe.untested_transformers(installed, f"transformers{accepted().specifier}")
    if not warns:
        assert message is None
        return
    assert message is not None and "\n" not in message
    assert installed in message and str(accepted().specifier) in message


def test_import_warns_once_outside_the_range():
    """A fresh process whose transformers reports 5.17.0: `import xlpe` + `import transformers` warn exactly once."""
    from importlib import metadata

    try:
        metadata.requires("xlpe")
    except metadata.PackageNotFoundError:
        pytest.skip("xlpe is not installed (pip install -e .): the range is read from its metadata")
    script = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '5.17.0' if name == 'transformers' else real(name)\n"
        "import xlpe, transformers\n"
        "from xlpe import XLPEMarianConfig\n"
        "import xlpe\n"
        "xlpe.register()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    lines = [line for line in result.stderr.splitlines() if "is tested with transformers" in line]
    assert len(lines) == 1, result.stderr
    clean = subprocess.run(
        [sys.executable, "-c", "import xlpe, transformers"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert "is tested with transformers" not in clean.stderr
    assert re.search(r"5\.17\.0", lines[0])


def test_the_remote_code_range_is_setup_cfgs():
    """The model files travel without the package metadata: they carry the range as constants, kept equal here."""
    from xlpe.models.transformers_compat import ACCEPTED_TRANSFORMERS, untested_transformers_release

    bounds = {spec.operator: spec.version for spec in accepted().specifier}
    assert ACCEPTED_TRANSFORMERS == (bounds[">="], bounds["<="])
    assert untested_transformers_release(bounds[">="]) is None and untested_transformers_release(bounds["<="]) is None
    message = untested_transformers_release("5.17.0")
    assert message is not None and "\n" not in message and "5.17.0" in message


def test_plain_import_warns_once_without_importing_transformers():
    from importlib import metadata

    try:
        metadata.requires("xlpe")
    except metadata.PackageNotFoundError:
        pytest.skip("xlpe is not installed (pip install -e .): the range is read from its metadata")
    script = (
        "import importlib.metadata as m, sys\n"
        "real = m.version\n"
        "m.version = lambda name: '5.17.0' if name == 'transformers' else real(name)\n"
        "import xlpe\n"
        "print('transformers' in sys.modules)\n"
        "import xlpe.models.transformers_compat\n"  # the package said it: the model files stay silent
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    lines = [line for line in result.stderr.splitlines() if "tested with transformers" in line]
    assert len(lines) == 1 and "5.17.0" in lines[0], result.stderr
    assert result.stdout.strip().splitlines()[0] == "False"


def test_remote_code_without_the_package_warns_once(toy_tokenizer, tmp_path):
    """A saved model loaded with trust_remote_code where xlpe cannot be imported: its model files say it."""
    from conftest import save_tiny_xlpe_model

    folder = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    script = (
        "import sys\n"
        "sys.modules['xlpe'] = None\n"  # the package is NOT importable here
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '5.17.0' if name == 'transformers' else real(name)\n"
        "from transformers import AutoModelForSeq2SeqLM\n"
        f"model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        "print(type(model).__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")},
        timeout=300,
    )
    assert result.stdout.strip().splitlines()[-1].startswith("transformers_modules"), result.stdout
    lines = [line for line in result.stderr.splitlines() if "tested with transformers" in line]
    assert len(lines) == 1 and "5.17.0" in lines[0] and ">=5.23.0,<=5.24.0" in lines[0], result.stderr
