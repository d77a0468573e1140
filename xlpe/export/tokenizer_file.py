"""The export's tokenizer, read with the `tokenizers` library alone (no transformers): `tokenizer.json` and the
settings of `tokenizer_config.json`, used as transformers' `TokenizersBackend` (`PreTrainedTokenizerFast`) uses
them, so the ids, the padding, the truncation and the decoded text are the same (tests/export/test_serving.py).

`load_tokenizer` gives a `TokenizerFile` for the tokenizers every xlpe family trains (`xlpe-prepare`: a
`tokenizer.json` whose `tokenizer_config.json` names `TokenizersBackend` or `PreTrainedTokenizerFast`), and
transformers' `AutoTokenizer` for any other (OPUS-MT's sentencepiece `MarianTokenizer`, whose Python code
transformers holds): `needs_transformers` says why in one line, the error where transformers is not installed.
What `TokenizerFile` gives is what `OnnxTranslator` asks of a tokenizer, and what the tokenizer fingerprint
(`xlpe.evaluation.model_loading.tokenizer_definition`) reads, so an export's verification checks it as it checks
transformers' tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FAST_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
# transformers' `SPECIAL_TOKENS_ATTRIBUTES`: the named special tokens of `special_tokens_map`
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _settings(directory: Path) -> dict:
    path = directory / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def needs_transformers(directory) -> str | None:
    """Why the tokenizer saved in `directory` needs transformers (one clause), or None when `TokenizerFile` reads it
    as transformers does."""
    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file():
        return "its tokenizer has no tokenizer.json (a sentencepiece tokenizer, e.g. OPUS-MT's MarianTokenizer)"
    settings = _settings(directory)
    name = settings.get("tokenizer_class")
    if name not in FAST_CLASSES:
        return f"its tokenizer_config.json names tokenizer_class {name!r} (not one of {', '.join(FAST_CLASSES)})"
    if settings.get("backend", "tokenizers") != "tokenizers":
        return f"its tokenizer_config.json names backend {settings['backend']!r}"
    for option in ("clean_up_tokenization_spaces", "split_special_tokens"):
        if settings.get(option):
            return f"its tokenizer_config.json sets {option}"
    return None


def load_tokenizer(directory):
    """A `TokenizerFile` of `directory`, or transformers' `AutoTokenizer` where `needs_transformers` says so
    (ValueError in one line when transformers is not installed)."""
    reason = needs_transformers(directory)
    if reason is None:
        return TokenizerFile(directory)
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ValueError(
            f"{directory}: {reason}: reading it needs transformers, which is not installed: pip install xlpe"
        ) from error
    return AutoTokenizer.from_pretrained(str(directory))


def _token(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class Encoded(dict):
    """`input_ids` and `attention_mask` of a batch (numpy int64 [batch, length] when padded, else lists), and the
    `tokenizers` `Encoding` of each text (`encodings`: offsets and word ids, as a BatchEncoding has them)."""

    def __init__(self, encodings, arrays: bool):
        ids = [encoding.ids for encoding in encodings]
        mask = [encoding.attention_mask for encoding in encodings]
        if arrays:
            ids, mask = np.array(ids, dtype=np.int64), np.array(mask, dtype=np.int64)
        super().__init__(input_ids=ids, attention_mask=mask)
        self.encodings = encodings


class TokenizerFile:
    """`tokenizer.json` through `tokenizers.Tokenizer` with `tokenizer_config.json`'s special tokens, sides and
    `model_max_length` (module docstring): `tokenizer(texts, padding=..., truncation=..., max_length=...)` and
    `batch_decode(ids, skip_special_tokens=...)` as transformers' fast tokenizer gives them."""

    def __init__(self, directory):
        from tokenizers import Tokenizer

        directory = Path(directory)
        settings = _settings(directory)
        self.backend_tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.padding_side = settings.get("padding_side", "right")
        self.truncation_side = settings.get("truncation_side", "right")
        self.split_special_tokens = bool(settings.get("split_special_tokens", False))
        self.model_max_length = int(settings.get("model_max_length") or 10**30)
        self.special_tokens_map = {
            name: _token(settings[name]) for name in NAMED_SPECIAL_TOKENS if _token(settings.get(name)) is not None
        }
        self.pad_token = self.special_tokens_map.get("pad_token")
        self.pad_token_id = self.convert_tokens_to_ids(self.pad_token) if self.pad_token else None

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)

    def __call__(self, texts, padding=False, truncation=False, max_length=None, return_tensors=None, verbose=True):
        """The `Encoded` ids and mask of `texts` (special tokens added by the post-processor): cut to `max_length`
        (default `model_max_length`) with `truncation`, right- or left-padded to the longest with `padding`."""
        backend = self.backend_tokenizer
        if truncation:
            limit = self.model_max_length if max_length is None else int(max_length)
            backend.enable_truncation(limit, stride=0, strategy="longest_first", direction=self.truncation_side)
        else:
            backend.no_truncation()
        if padding:
            if self.pad_token_id is None:
                raise ValueError("padding=True: the tokenizer has no pad_token (tokenizer_config.json)")
            backend.enable_padding(direction=self.padding_side, pad_id=self.pad_token_id, pad_token=self.pad_token)
        else:
            backend.no_padding()
        encodings = backend.encode_batch(list(texts), add_special_tokens=True)
        return Encoded(encodings, arrays=bool(padding) and return_tensors == "np")

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        rows = [np.asarray(row, dtype=np.int64).tolist() for row in sequences]
        return self.backend_tokenizer.decode_batch(rows, skip_special_tokens=skip_special_tokens)


__all__ = ["FAST_CLASSES", "Encoded", "TokenizerFile", "load_tokenizer", "needs_transformers"]
