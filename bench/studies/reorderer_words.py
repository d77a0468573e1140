"""Does the in-model reorderer keep a word's sub-words together, and what if it ranked whole words? (issue 17)

For a trained XL PE model and its prepared test split (oracle `reorder_positions`), decodes the test split
twice with beam search: `reorder_unit="token"` (each piece ranked by its own score, as before 0.2) and
`reorder_unit="word"` (each whitespace word ranked by the mean score of its pieces, word starts from the
tokenizer: the 0.2 default). Reports BLEU/chrF, token-level Kendall τ of the predicted positions against the
oracle, and how many multi-piece words the predicted order splits.

    xlpe-train ... --output_dir runs/enja --cache_dir runs/cache      # an XL PE model, test split prepared
    python bench/studies/reorderer_words.py --model runs/enja --prepared runs/cache/prepared/xlpe-prepare-<id>/data
    --lang ja
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout without installing

from xlpe.evaluation.metrics import corpus_bleu_chrf  # noqa: E402
from xlpe.features.reordering import kendall_tau  # noqa: E402
from xlpe.features.tokenization import word_start_flags  # noqa: E402
from xlpe.training.model_setup import set_word_starts  # noqa: E402


def split_words(positions: np.ndarray, word_start: np.ndarray, movable: np.ndarray) -> tuple[int, int]:
    """(multi-piece words whose pieces are not consecutive and in order, multi-piece words)."""
    split = total = 0
    k, n = 0, len(positions)
    while k < n:
        if not (movable[k] and word_start[k]):
            k += 1
            continue
        end = k + 1
        while end < n and movable[end] and not word_start[end]:
            end += 1
        if end - k > 1:
            total += 1
            split += bool(np.any(np.diff(positions[k:end]) != 1))
        k = end
    return split, total


def evaluate(model, tokenizer, test, word_start: torch.Tensor, lang: str, beams: int, batch_size: int) -> dict:
    encoder = model.get_encoder()
    hypotheses, taus, split, total = [], [], 0, 0
    for start in range(0, len(test), batch_size):
        rows = test.select(range(start, min(start + batch_size, len(test))))
        batch = tokenizer.pad({"input_ids": rows["input_ids"]}, return_tensors="pt")
        with torch.no_grad():
            encoded = encoder(**batch)  # once: its positions are reported and generate() decodes from it
            predicted = encoded.reorder_positions
            generated = model.generate(
                **batch,
                encoder_outputs=encoded,
                num_beams=beams,
                max_length=encoder.config.max_position_embeddings // 2,
            )
        hypotheses += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
        movable = encoder.movable_tokens(batch["input_ids"], batch["attention_mask"].bool())
        for r, row in enumerate(rows):
            length = len(row["input_ids"])
            keep = movable[r, :length].numpy()
            pred, gold = predicted[r, :length].numpy(), np.asarray(row["reorder_positions"])
            if keep.sum() > 1:
                taus.append(kendall_tau(np.argsort(np.argsort(pred[keep])), np.argsort(np.argsort(gold[keep]))))
            s, t = split_words(pred, word_start[batch["input_ids"][r, :length]].numpy(), keep)
            split, total = split + s, total + t
    scores = corpus_bleu_chrf(hypotheses, test["target_text"], target_language=lang)
    return {
        "bleu": scores["bleu"]["score"],
        "chrf": scores["chrf"]["score"],
        "signature": scores["bleu"]["signature"],
        "tau": float(np.mean(taus)),
        "split": split,
        "multi_piece_words": total,
    }


def main(argv=None) -> int:
    import datasets
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained XL PE model directory (with its tokenizer)")
    parser.add_argument(
        "--prepared", required=True, help="a prepared DatasetDict with a test split (reorder_positions, target_text)"
    )
    parser.add_argument("--lang", default=None, help="target language (BLEU tokenizer)")
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=50)
    args = parser.parse_args(argv)
    model, tokenizer = (
        AutoModelForSeq2SeqLM.from_pretrained(args.model).eval(),
        AutoTokenizer.from_pretrained(args.model),
    )
    test = datasets.load_from_disk(args.prepared)["test"]
    if word_start_flags(tokenizer) is None:
        raise SystemExit(f"{args.model}: the tokenizer marks no word boundaries; nothing to compare")
    model.config.reorder_unit = "word"
    set_word_starts(model, tokenizer)  # what xlpe-train does for a model it trains
    word_start = model.get_encoder().word_starts.flags.bool()
    print("| reorderer ranks | test BLEU | chrF | token τ vs oracle | multi-piece words split |")
    print("|---|---|---|---|---|")
    for unit, label in (("token", "pieces (reorder_unit=token)"), ("word", "words (reorder_unit=word)")):
        model.config.reorder_unit = unit
        r = evaluate(model, tokenizer, test, word_start, args.lang, args.num_beams, args.batch_size)
        print(
            f"| {label} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['tau']:.3f} | {r['split']}/{r['multi_piece_words']} "
            f"({100 * r['split'] / max(r['multi_piece_words'], 1):.1f} %) |",
            flush=True,
        )
    print(f"\nSignature: `{r['signature']}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
