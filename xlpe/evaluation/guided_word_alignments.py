"""Word alignments of a model's own translations from its guided-alignment head (Garg et al. 2019, Sec. 4;
xlpe/models/guided_alignment.py), as Pharaoh `i-j` lines in words of the source and of the translation.

Each (source, translation) pair is force-decoded once (teacher forcing on the translation's tokens, `</s>`
included); the supervised cross-attention probabilities p_ts are summed over the sub-words of each source word
and over the sub-words of each translation word (special tokens count for no word), and each translation word j
is linked to the source word i with the largest sum: one link `i-j` per translation word. Words are the
whitespace-separated words of the line, as in training. A blank source or translation gives an empty line.
"""

from __future__ import annotations

import torch

from ..features.tokenization import tokenize_with_word_ids
from ..models.guided_alignment import CrossAttentionCapture


def check_guided_model(model) -> None:
    """ValueError unless `model` was trained with guided alignment (`guided_alignment_weight` > 0)."""
    weight = getattr(model.config, "guided_alignment_weight", None)
    if weight is None:
        raise ValueError(
            f"alignments need a model with guided alignment (xlpe or dpe); {type(model).__name__} has none"
        )
    if not weight > 0:
        raise ValueError(
            "alignments need a model trained with guided alignment: its config has guided_alignment_weight="
            f"{weight} (the cross-attention heads were never supervised)"
        )


def _padded(rows: list[list[int]], value: int) -> torch.Tensor:
    longest = max(len(row) for row in rows)
    return torch.tensor([row + [value] * (longest - len(row)) for row in rows], dtype=torch.long)


def _word_matrix(word_ids: list[list[int]], words: list[int], length: int) -> torch.Tensor:
    """[batch, tokens, words] one-hot of each token's word (special and padded tokens: zero rows)."""
    ids = _padded([[w if w >= 0 else -1 for w in row] for row in word_ids], -1)[:, :length]
    matrix = torch.zeros(len(word_ids), length, max(max(words), 1))
    real = (ids >= 0) & (ids < matrix.shape[2])
    batch = torch.arange(len(word_ids))[:, None].expand_as(ids)
    token = torch.arange(length)[None, :].expand_as(ids)
    matrix[batch[real], token[real], ids[real]] = 1.0
    return matrix


@torch.no_grad()
def guided_word_alignments(model, tokenizer, sources: list[str], translations: list[str], batch_size: int = 32):
    """One Pharaoh line per pair (module doc)."""
    check_guided_model(model)
    if len(sources) != len(translations):
        raise ValueError(f"{len(sources)} sources but {len(translations)} translations")
    sources = [" ".join(s.split()) for s in sources]
    translations = [" ".join(t.split()) for t in translations]
    lines = [""] * len(sources)
    todo = [i for i in range(len(sources)) if sources[i] and translations[i]]
    device = next(model.parameters()).device
    config = model.config
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            source_ids, source_words = tokenize_with_word_ids(tokenizer, [sources[i] for i in batch])
            target_ids, target_words = tokenize_with_word_ids(tokenizer, [translations[i] for i in batch], target=True)
            input_ids = _padded(source_ids, config.pad_token_id).to(device)
            attention_mask = _padded([[1] * len(row) for row in source_ids], 0).to(device)
            labels = _padded(target_ids, -100).to(device)
            with CrossAttentionCapture(model.model.decoder, config.guided_alignment_layer) as capture:
                model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
            probabilities = capture.probabilities(attention_mask, config.guided_alignment_head).cpu()
            source_counts = [len(sources[i].split()) for i in batch]
            target_counts = [len(translations[i].split()) for i in batch]
            to_source = _word_matrix(source_words, source_counts, input_ids.shape[1])
            to_target = _word_matrix(target_words, target_counts, labels.shape[1])
            word_probabilities = to_target.transpose(1, 2) @ probabilities @ to_source  # [batch, tgt words, src words]
            absent = torch.arange(word_probabilities.shape[2])[None, :] >= torch.tensor(source_counts)[:, None]
            word_probabilities = word_probabilities.masked_fill(absent[:, None, :], -1.0)  # never a missing word
            best = word_probabilities.argmax(-1).tolist()
            for row, index in enumerate(batch):
                lines[index] = " ".join(f"{best[row][j]}-{j}" for j in range(target_counts[row]))
    finally:
        model.train(was_training)
    return lines


__all__ = ["check_guided_model", "guided_word_alignments"]
