"""CTranslate2 export of a stock MarianMT model (`xlpe-export --format ctranslate2`), and translating with it.

CTranslate2 is the engine most OPUS-MT users serve with. It converts stock config classes only and takes no
per-token position input, so it represents exactly a **stock `MarianMTModel`**: an OPUS-MT checkpoint, or
`xlpe-train --model_type vanilla`. Every xlpe family (XL PE, DPE, mvPE+POS, the position options) needs the ONNX
export; `check_convertible` says so in one line. The conversion is CTranslate2's own converter
(`ctranslate2.converters.TransformersConverter`): a real engine rather than a hand-written one. Its Marian loader
takes OPUS-MT's layout, `<pad>` the last id (it drops that id's row and vocabulary entry: CTranslate2 starts the
decoder from a zero embedding instead); a model trained here has `<pad>` 0, so `pad_last_converter` hands the
converter the model and vocabulary with `<pad>` moved to the end (the same function: only the ids' order changes,
and CTranslate2 reads and writes pieces, not ids).

* `export_ctranslate2`: the model directory -> CTranslate2's `model.bin` (fp32, or int8 weights with
  `quantize="int8"`), the model's tokenizer and generation files copied beside it, and `ctranslate2_manifest.json`
  (the source model, CTranslate2's version, the quantization, the position limit, the search settings).
* `CTranslate2Translator`: raw text in, text out, with the package's length rule (xlpe/models/length_rule.py):
  each sentence gets at most min(floor(1.5 n) + 10, max_position_embeddings - 1) new tokens, its end-of-sentence
  token included, whatever it is batched with. CTranslate2 takes one `max_decoding_length` a call, so sentences are
  decoded in groups of equal budget; a hypothesis that reaches its budget without ending is reported (as the other
  paths report one whose end was forced). Sources longer than the position limit are cut to it and reported.
* `verify_ctranslate2`: the export against its PyTorch model: greedy and beam translations of probe sentences,
  token for token.

Layer: beside `exporter` (it uses `evaluation.model_loading` and `models.length_rule`); only `cli` imports it.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
from pathlib import Path

from .streams import check_streams, threads_per_stream

MANIFEST_NAME = "ctranslate2_manifest.json"
FORMAT = "ctranslate2"
QUANTIZATIONS = {None: None, "int8": "int8"}  # --quantize -> CTranslate2's weight quantization
# the files of a model directory that travel with the converted model (tokenizer and generation settings)
COPIED_FILES = (
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


def import_ctranslate2():
    """The ctranslate2 module, or ValueError naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError:
        raise ValueError(
            'ctranslate2 is not installed: --format ctranslate2 needs pip install "xlpe[ctranslate2]"'
        ) from None
    return ctranslate2


def check_convertible(model_dir) -> dict:
    """The model's config.json, or ValueError (one line) when CTranslate2 cannot represent the model exactly."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"--model {model_dir}: no config.json (not a saved model)")
    config = json.loads(path.read_text(encoding="utf-8"))
    model_type = config.get("model_type")
    if model_type != "marian":
        raise ValueError(
            f"--format ctranslate2 converts a stock MarianMT model (model_type 'marian'), not {model_type!r}: "
            "CTranslate2 has no per-token position input, so this model's positions would be lost; use the ONNX "
            "export (--format onnx)"
        )
    return config


def check_zero_start_embedding(model_dir, config: dict) -> None:
    """ValueError unless the decoder's `<pad>` embedding (its start token) is zero. CTranslate2 starts Marian's
    decoder from a zero embedding (Marian's own vocabulary has no `<pad>`; a converted OPUS-MT checkpoint's row is
    zero). Fine-tuning with tied output embeddings moves that row (the pad logit's gradient), and CTranslate2 would
    then translate another function. Read from the weights file, without building the model."""
    from safetensors import safe_open

    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        raise ValueError(f"--model {model_dir}: no model.safetensors (sharded or .bin weights are not converted here)")
    pad = int(config["pad_token_id"])
    with safe_open(str(path), framework="pt") as weights:
        names = set(weights.keys())
        name = next(n for n in ("model.decoder.embed_tokens.weight", "model.shared.weight") if n in names)
        largest = float(weights.get_slice(name)[pad : pad + 1].abs().max())
    if largest != 0.0:
        raise ValueError(
            f"--format ctranslate2: {model_dir}'s <pad> embedding (id {pad}, the decoder's start token) is not zero "
            f"(max |x| {largest:.3g}; fine-tuning with tied output embeddings moves it), and CTranslate2 starts the "
            "decoder from a zero embedding: it would translate differently; use the ONNX export (--format onnx)"
        )


def export_ctranslate2(model_dir, output, quantize: str | None = None, overwrite: bool = False) -> dict:
    """Convert the stock Marian in `model_dir` to `output` (module doc); returns the manifest."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {sorted(q for q in QUANTIZATIONS if q)} or None, got {quantize!r}")
    ctranslate2 = import_ctranslate2()
    config = check_convertible(model_dir)
    check_zero_start_embedding(model_dir, config)
    model_dir, output = Path(model_dir), Path(output)
    if output.exists() and overwrite:
        shutil.rmtree(output)
    copied = [name for name in COPIED_FILES if (model_dir / name).is_file()]
    separate = (model_dir / "target_vocab.json").is_file()
    pad, last = int(config["pad_token_id"]), int(config["vocab_size"]) - 1
    if pad != last and (separate or config.get("share_encoder_decoder_embeddings") is False):
        raise ValueError(
            f"--format ctranslate2: {model_dir} has separate source and target vocabularies with <pad> at id {pad}, "
            f"not the last ({last}), which CTranslate2's Marian converter needs; use the ONNX export (--format onnx)"
        )
    converter_class = ctranslate2.converters.TransformersConverter
    if pad != last:
        converter_class = pad_last_converter(converter_class, pad)
    converter = converter_class(str(model_dir), copy_files=copied)
    converter.convert(str(output), quantization=QUANTIZATIONS[quantize], force=False)
    if (model_dir / "target_vocab.json").is_file():
        write_separate_vocabularies(model_dir, output)
    generation = (
        json.loads((model_dir / "generation_config.json").read_text()) if "generation_config.json" in copied else {}
    )
    manifest = {
        "format": FORMAT,
        "ctranslate2": ctranslate2.__version__,
        "model": str(model_dir.resolve()),
        "quantization": quantize or "fp32",
        "position_limit": int(config["max_position_embeddings"]),
        "num_beams": int(generation.get("num_beams") or config.get("num_beams") or 1),
        "files": sorted(p.name for p in output.iterdir()),
    }
    (output / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def pad_last_order(vocab_size: int, pad: int) -> list[int]:
    """Old ids in their new order: every id but `pad` as it was, then `pad`."""
    return [i for i in range(vocab_size) if i != pad] + [pad]


def move_pad_last(model, pad: int):
    """`model` (a MarianMTModel, shared vocabulary) with `<pad>` moved to the last id: the rows of every embedding
    and of the output projection and the entries of `final_logits_bias` in `pad_last_order`, `pad_token_id` and
    `decoder_start_token_id` following it. Each tensor is permuted from its own rows (tied ones come out equal)."""
    import torch

    order = torch.tensor(pad_last_order(model.config.vocab_size, pad))
    modules = [model.model.shared, model.model.encoder.embed_tokens, model.model.decoder.embed_tokens, model.lm_head]
    with torch.no_grad():
        for module in modules:
            module.weight = torch.nn.Parameter(module.weight[order].clone(), requires_grad=False)
        if getattr(model, "final_logits_bias", None) is not None:
            model.final_logits_bias = model.final_logits_bias[:, order].clone()
    new_id = {old: new for new, old in enumerate(order.tolist())}
    for name in ("pad_token_id", "decoder_start_token_id", "eos_token_id", "bos_token_id"):
        if isinstance(getattr(model.config, name, None), int):
            setattr(model.config, name, new_id[getattr(model.config, name)])
    return model


class _PadLastVocabulary:
    """A tokenizer as CTranslate2's Marian loader reads it (`get_vocab`, the special tokens), its ids in
    `pad_last_order`."""

    def __init__(self, tokenizer, pad: int):
        self._tokenizer = tokenizer
        pieces = tokenizer.convert_ids_to_tokens(pad_last_order(len(tokenizer), pad))
        self._vocabulary = {piece: i for i, piece in enumerate(pieces)}

    def get_vocab(self) -> dict:
        return dict(self._vocabulary)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


def pad_last_converter(converter_class, pad: int):
    """`converter_class` (CTranslate2's `TransformersConverter`) loading the model and tokenizer with `<pad>` (id
    `pad`) moved to the last id (`move_pad_last`), as its Marian loader expects (module docstring)."""

    class PadLastConverter(converter_class):
        def load_model(self, *args, **kwargs):
            return move_pad_last(super().load_model(*args, **kwargs), pad)

        def load_tokenizer(self, *args, **kwargs):
            return _PadLastVocabulary(super().load_tokenizer(*args, **kwargs), pad)

    return PadLastConverter


def write_separate_vocabularies(model_dir: Path, output: Path) -> None:
    """An `opus-mt-tc` model with separate vocabularies (`target_vocab.json`): the converter writes the source
    vocabulary as the shared one, so the target ids would read as source pieces. Write CTranslate2's
    `source_vocabulary.json` and `target_vocabulary.json` instead, each in id order without the trailing `<pad>`
    (the converter drops that row from the weights: the decoder starts from a zero embedding)."""
    for name, file in (("source", "vocab.json"), ("target", "target_vocab.json")):
        vocabulary = json.loads((model_dir / file).read_text(encoding="utf-8"))
        pieces = [piece for piece, _ in sorted(vocabulary.items(), key=lambda item: item[1])]
        if pieces[-1] != "<pad>" or sorted(vocabulary.values()) != list(range(len(pieces))):
            raise ValueError(f"{model_dir / file}: not an OPUS-MT vocabulary (ids 0..n-1, <pad> the last)")
        (output / f"{name}_vocabulary.json").write_text(json.dumps(pieces[:-1], ensure_ascii=False), encoding="utf-8")
    (output / "shared_vocabulary.json").unlink(missing_ok=True)


def is_ctranslate2_export(directory) -> bool:
    return (Path(directory) / MANIFEST_NAME).is_file()


class CTranslate2Translator:
    """Raw text -> translations with a `--format ctranslate2` export (module doc). `streams`: CTranslate2's
    `inter_threads` (batches decoded at once by `streams.translate_batches`), sharing `threads` out."""

    def __init__(self, directory, threads: int | None = None, compute_type: str = "default", streams: int = 1):
        from transformers import AutoTokenizer

        from ..evaluation.model_loading import check_padding_side
        from ..models.length_rule import align_tokenizer_limit

        ctranslate2 = import_ctranslate2()
        self.streams = check_streams(streams)
        self._lock = threading.Lock()  # the tokenizer, under streams
        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / MANIFEST_NAME).read_text(encoding="utf-8"))
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{self.directory / MANIFEST_NAME}: format {self.manifest.get('format')!r}, not {FORMAT}")
        self.translator = ctranslate2.Translator(
            str(self.directory),
            device="cpu",
            inter_threads=self.streams,
            intra_threads=threads_per_stream(threads, self.streams) or 0,
            compute_type=compute_type,
        )
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.directory))
        check_padding_side(self.tokenizer, str(self.directory))
        self.limit = int(self.manifest["position_limit"])
        align_tokenizer_limit(self.tokenizer, self.limit)
        # source ids -> source pieces: a MarianTokenizer maps ids to pieces with its TARGET vocabulary (what decode
        # needs), which with separate vocabularies is another piece behind the same id
        source_vocabulary = (
            getattr(self.tokenizer, "encoder", None) if getattr(self.tokenizer, "separate_vocabs", False) else None
        )
        self._source_pieces = {i: piece for piece, i in source_vocabulary.items()} if source_vocabulary else None

    def source_tokens(self, ids: list[int]) -> list[str]:
        if self._source_pieces is None:
            return self.tokenizer.convert_ids_to_tokens(ids)
        return [self._source_pieces[i] for i in ids]

    def source_limit(self) -> int:
        return self.limit

    def translate_with_report(
        self,
        texts: list[str],
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        min_new_tokens: int | None = None,
    ):
        """(translations, indices of sources cut at the limit, indices of translations that reached their budget).
        `max_new_tokens` caps every sentence alike and replaces the rule (as in `generate`: the end token counts);
        `min_new_tokens` keeps the end token away until then (speed rows that decode a fixed length)."""
        from ..models.length_rule import length_budgets

        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}")
        words = [" ".join(text.split()) for text in texts]
        with self._lock:
            full = self.tokenizer(words, truncation=False, verbose=False)["input_ids"] if words else []
        too_long = [i for i, ids in enumerate(full) if len(ids) > self.limit]
        ids = [row[: self.limit - 1] + row[-1:] if len(row) > self.limit else row for row in full]  # keep </s>
        budgets = [int(max_new_tokens or length_budgets(len(row), self.limit)) for row in ids]
        beams = int(num_beams or self.manifest["num_beams"])
        translations, at_limit = [""] * len(words), []
        special = set(self.tokenizer.all_special_tokens)  # dropped from the target pieces, once a call
        for budget in sorted(set(budgets)):  # one call per budget: the rule is per sentence, the engine's per call
            rows = [i for i, b in enumerate(budgets) if b == budget]
            results = self.translator.translate_batch(
                [self.source_tokens(ids[i]) for i in rows],
                beam_size=beams,
                max_decoding_length=budget - 1,  # new tokens before </s>: the budget counts the end token
                min_decoding_length=max(0, min((min_new_tokens or 0), budget) - 1),
                return_end_token=False,
            )
            for i, result in zip(rows, results):
                tokens = result.hypotheses[0]
                if len(tokens) >= budget - 1:
                    at_limit.append(i)
                # target pieces to text with the target side's decoding (separate vocabularies: the same id is
                # another piece on each side, so never through ids)
                with self._lock:
                    text = self.tokenizer.convert_tokens_to_string([t for t in tokens if t not in special])
                translations[i] = text.strip()
        return translations, too_long, sorted(at_limit)

    def translate(self, texts: list[str], num_beams: int | None = None, **lengths) -> list[str]:
        return self.translate_with_report(texts, num_beams, **lengths)[0]


def probe_sentences(pieces: list[str], special: set[str], count: int = 8, seed: int = 0) -> list[str]:
    """`count` source sentences of 3-15 word-initial source `pieces` (any model's language)."""
    vocabulary = [piece for piece in pieces if piece.startswith("▁") and len(piece) > 1 and piece not in special]
    generator = random.Random(seed)
    sentences = [generator.choices(vocabulary, k=generator.randint(3, 15)) for _ in range(count)]
    return ["".join(sentence).replace("▁", " ").strip() for sentence in sentences]


def verify_ctranslate2(directory, model_dir, beams=(1, 4)) -> dict:
    """Translate probe sentences with the export and as `xlpe-translate` translates them with the PyTorch model in
    `model_dir` (`XLPETranslationPipeline`, the length rule per sentence): ValueError naming the first sentence whose
    translation differs (fp32), or, for an int8 export, the share that is identical (reported, not refused: int8
    weights change the scores). Returns {beams: share}."""
    import torch

    from ..evaluation.model_loading import load_model_and_tokenizer
    from ..models.pipeline_translation import XLPETranslationPipeline

    translator = CTranslate2Translator(directory)
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    pipeline = XLPETranslationPipeline(model=model, tokenizer=tokenizer, device=torch.device("cpu"))
    source_pieces = translator.source_tokens(list(range(len(translator._source_pieces or tokenizer))))
    sources = probe_sentences(source_pieces, set(tokenizer.all_special_tokens))
    same = {}
    for num_beams in beams:
        exported = translator.translate(sources, num_beams=num_beams)
        results = pipeline(sources, batch_size=len(sources), truncation=True, num_beams=num_beams)
        reference = [result["translation_text"].strip() for result in results]
        differ = [i for i, (a, b) in enumerate(zip(exported, reference)) if a != b]
        if differ and translator.manifest["quantization"] == "fp32":
            i = differ[0]
            raise ValueError(
                f"{directory}: the {num_beams}-beam translation of probe sentence {i} ({sources[i]!r}) differs from "
                f"{model_dir}'s: {exported[i]!r} against {reference[i]!r}"
            )
        same[num_beams] = 1.0 - len(differ) / len(sources)
    return same


__all__ = [
    "CTranslate2Translator",
    "MANIFEST_NAME",
    "check_convertible",
    "export_ctranslate2",
    "is_ctranslate2_export",
    "verify_ctranslate2",
]
