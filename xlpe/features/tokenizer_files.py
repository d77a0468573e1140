"""A saved tokenizer's files, checked before loading: a damaged one is named, with the line (`check_tokenizer_files`;
standard library only, so `xlpe-export --translate` checks an export where transformers is not installed).
"""

from __future__ import annotations

import json

TOKENIZER_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def check_tokenizer_files(folder, what: str | None = None) -> None:
    """ValueError naming the file and line when a JSON file of the tokenizer saved in the local folder `folder`
    does not parse (a truncated `tokenizer.json`: transformers reports it without a file name, or as the config's);
    `what` (e.g. "--model runs/M") opens the message. A Hub id or a missing folder is left to the loader."""
    from pathlib import Path

    directory = Path(str(folder)).expanduser()
    if not directory.is_dir():
        return
    for name in TOKENIZER_JSON_FILES:
        path = directory / name
        if not path.is_file():
            continue
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            problem = f"{path}:{error.lineno}: not valid JSON ({error.msg}; cut short?)"
        except (UnicodeDecodeError, OSError) as error:
            problem = f"{path}: cannot be read ({type(error).__name__})"
        else:
            continue
        raise ValueError(f"{what + ': ' if what else ''}the tokenizer cannot be loaded: {problem}")


__all__ = ["TOKENIZER_JSON_FILES", "check_tokenizer_files"]
