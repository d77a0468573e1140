"""xlpe-translate --alignments: one Pharaoh line per input line (blank lines blank), one link per output word
within the source words, equal to the library function (xlpe.evaluation.guided_word_alignments); a model
without guided alignment is refused in one line; the word rule against a hand-made attention."""

from __future__ import annotations

import pytest
import torch
from conftest import save_tiny_xlpe_model

from xlpe import XLPEMarianMTModel
from xlpe.cli.translate import main
from xlpe.evaluation import guided_word_alignments as module

LINES = ["the cat sees the dog", "", "children play", "  a dog chases the small cat  "]


@pytest.fixture(scope="module")
def guided_dir(toy_tokenizer, tmp_path_factory):
    directory = save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("guided"))
    model = XLPEMarianMTModel.from_pretrained(directory)
    model.config.guided_alignment_weight = 0.5
    model.save_pretrained(directory)
    return directory


def run(model_dir, tmp_path, *extra):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    argv = ["--model", str(model_dir), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]
    return main([*argv, "--max_new_tokens", "5", "--batch_size", "2", "--quiet", *extra])


def test_one_pharaoh_line_per_input_line(guided_dir, tmp_path, toy_tokenizer):
    assert run(guided_dir, tmp_path, "--alignments", str(tmp_path / "align.txt")) == 0
    outputs = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    links = (tmp_path / "align.txt").read_text(encoding="utf-8").splitlines()
    assert len(links) == len(LINES) == len(outputs)
    for line, output, alignment in zip(LINES, outputs, links):
        pairs = [tuple(map(int, link.split("-"))) for link in alignment.split()]
        assert [j for _, j in pairs] == list(range(len(output.split()) if line.strip() else 0))
        assert all(0 <= i < len(line.split()) for i, _ in pairs)
    model = XLPEMarianMTModel.from_pretrained(guided_dir)
    assert links == module.guided_word_alignments(model, toy_tokenizer, LINES, outputs)


def test_a_model_without_guided_alignment_is_refused(toy_tokenizer, tmp_path, capsys):
    plain = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "plain")
    assert run(plain, tmp_path, "--alignments", str(tmp_path / "align.txt")) == 2
    assert "guided_alignment_weight=0.0" in capsys.readouterr().err
    assert not (tmp_path / "align.txt").exists()


def test_the_word_rule_on_a_hand_made_attention(guided_dir, toy_tokenizer, monkeypatch):
    """Each output word goes to the source word with the largest summed attention of its sub-words."""
    model = XLPEMarianMTModel.from_pretrained(guided_dir)
    source, output = "the cat sees", "dog the"
    _, (source_words,) = module.tokenize_with_word_ids(toy_tokenizer, [source])
    _, (target_words,) = module.tokenize_with_word_ids(toy_tokenizer, [output], target=True)
    attention = torch.zeros(1, len(target_words), len(source_words))
    for t, word in enumerate(target_words):  # output word 0 -> source word 2, output word 1 -> source word 0
        wanted = {0: 2, 1: 0}.get(word)
        if wanted is not None:
            attention[0, t, source_words.index(wanted)] = 1.0
    monkeypatch.setattr(module.CrossAttentionCapture, "probabilities", lambda self, mask, head: attention)
    assert module.guided_word_alignments(model, toy_tokenizer, [source], [output]) == ["2-0 0-1"]
