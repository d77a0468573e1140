"""The README and docs spell every flag of an xlpe command as its `--help` shows it
(underscores: `--source_lang`, not `--source-lang`; the dash spelling is accepted as an alias but not written), and
name no flag the command does not have. Checked on every command line in a code block that runs an xlpe
command (continuation lines joined), and on inline code that starts with one."""

from __future__ import annotations

import argparse
import contextlib
import io
import re

import pytest
from conftest import REPO_ROOT

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(?<![\w/.-])(xlpe-(?:prepare|train|translate|evaluate|reorder|tagger|push|demo))(?![\w-])")
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")


def _parser_options(parser: argparse.ArgumentParser) -> set[str]:
    options = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in set(action.choices.values()):
                options |= _parser_options(subparser)
        options.update(option for option in action.option_strings if option.startswith("--"))
    return options


def shown_options() -> dict[str, set[str]]:
    """{command: the long options its --help shows, in the spelling it shows (the first of each option line)}."""
    from xlpe.cli import (
        demo,
        evaluate,
        prepare,
        push,
        reorder,
        tagger,
        train,
        translate,
    )

    shown = {
        "xlpe-translate": _parser_options(translate.build_parser()),
        "xlpe-evaluate": _parser_options(evaluate.build_parser()),
        "xlpe-push": _parser_options(push._parser()),
        "xlpe-prepare": _parser_options(prepare._parser()),
        "xlpe-reorder": _parser_options(reorder.build_parser()),
        "xlpe-tagger": _parser_options(tagger.build_parser()),
    }
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
        demo.main(["--help"])
    first_spellings = lambda text: {
        line.split()[0].rstrip(",") for line in text.splitlines() if line.startswith("  --")
    }
    shown["xlpe-demo"] = first_spellings(buffer.getvalue())
    shown["xlpe-train"] = first_spellings(train.help_text())
    return {command: options | {"--help"} for command, options in shown.items()}


def command_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each command in the document's code blocks (with its continuation lines joined,
    comments dropped) and of each inline code span, where an xlpe command is named."""
    found, in_block, pending, start = [], False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if in_block:
            code = line.split(" # ", 1)[0].split("  #", 1)[0]
            if not pending:
                start = number
            pending += " " + code.rstrip().rstrip("\\")
            if not code.rstrip().endswith("\\"):
                found.append((start, pending.strip()))
                pending = ""
        else:
            found += [(number, span) for span in re.findall(r"`([^`]+)`", line) if COMMAND.match(span)]
    return [(number, line) for number, line in found if COMMAND.search(line)]


def spelling_problems(path, shown: dict[str, set[str]]) -> list[str]:
    problems = []
    for number, line in command_lines(path.read_text(encoding="utf-8")):
        # each command's flags run until the next command on the line (pipes: `echo ... | xlpe-translate ...`)
        pieces = COMMAND.split(line)
        for command, rest in zip(pieces[1::2], pieces[2::2]):
            for flag in FLAG.findall(rest.split("|", 1)[0].split(" && ", 1)[0]):
                if flag in shown[command]:
                    continue
                underscored = "--" + flag[2:].replace("-", "_")
                hint = f"write {underscored}" if underscored in shown[command] else "no such flag"
                problems.append(f"{path.relative_to(REPO_ROOT)}:{number}: {command} {flag}: {hint}")
    return problems


@pytest.fixture(scope="module")
def shown():
    return shown_options()


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.name)
def test_docs_spell_flags_as_help_shows_them(path, shown):
    assert spelling_problems(path, shown) == []


# flags of other tools that share a name with one of ours (kept in their own spelling)
FOREIGN = ("fairseq's `--max-tokens`", "The dash spelling is accepted everywhere as an alias")


def test_inline_flags_use_the_shown_spelling(shown):
    """A flag in inline code without its command (`--cache_dir makes a rerun free`): never the dash spelling of
    an option that --help shows with underscores."""
    every = set().union(*shown.values())
    problems = []
    for path in DOCUMENTS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(mention in line for mention in FOREIGN):
                continue
            for span in re.findall(r"`([^`]+)`", line):
                problems += [
                    f"{path.name}:{number}: {flag}"
                    for flag in FLAG.findall(span)
                    if flag not in every and "--" + flag[2:].replace("-", "_") in every
                ]
    assert problems == []


def test_the_check_finds_a_dash_spelling_and_an_unknown_flag(shown):
    probe = REPO_ROOT / "docs" / ".spelling_check_probe.md"
    probe.write_text(
        "Run `xlpe-translate --model m --num-beams 4`.\n\n```bash\nxlpe-prepare --source a \\\n"
        "    --source-lang de --nonsense 1   # comment --ignored\n```\n",
        encoding="utf-8",
    )
    try:
        problems = spelling_problems(probe, shown)
    finally:
        probe.unlink()
    assert problems == [
        "docs/.spelling_check_probe.md:1: xlpe-translate --num-beams: write --num_beams",
        "docs/.spelling_check_probe.md:4: xlpe-prepare --source-lang: write --source_lang",
        "docs/.spelling_check_probe.md:4: xlpe-prepare --nonsense: no such flag",
    ]
