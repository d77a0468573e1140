"""Which options upgrade a trained sinusoidal MarianMT checkpoint function-preservingly.

Each row of the table in docs/training.md ("Upgrade paths from a stock checkpoint") is measured here: a stock
Marian with trained-looking (random, non-zero) weights and `final_logits_bias` is saved, loaded into the family with
the row's fields, and must give *identical* greedy and beam-search output and logits at step 0 ("yes"), or must
differ ("no": what the row's note says instead). The table is parsed from the page, so page and test cannot drift.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import REPO_ROOT
from family_tester import tiny_kwargs
from transformers import MarianConfig, MarianMTModel

from xlpe import XLPEMarianMTModel
from xlpe.models.registry import MODEL_FAMILIES

FAMILIES = {name: family.generation_model_class for name, family in MODEL_FAMILIES.items()}
SECTION = "### Upgrade paths from a stock checkpoint"


def value(text: str):
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def table_rows() -> list[tuple[str, str, dict, bool]]:
    """(option, family, config fields, preserved) of each row of the docs table."""
    page = (REPO_ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = page[page.index(SECTION) :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 4 or cells[0] in ("option", "") or set(cells[0]) <= set("-"):
            continue
        family, fields = cells[1].strip("`"), {}
        for item in filter(None, cells[2].strip("`").split(",")):
            key, _, text = item.partition("=")
            fields[key.strip()] = value(text)
        rows.append((cells[0], family, fields, cells[3].startswith("**yes**")))
    return rows


ROWS = table_rows()


def test_the_table_covers_every_option_the_issue_names():
    options = " ".join(option for option, *_ in ROWS)
    for name in ("InXL", "HeadXL", "Combination", "XL-relative", "XL-RoPE", "relative PE", "RoPE", "DPE", "POS"):
        assert name in options, name
    assert len(ROWS) >= 14


def trained_looking_stock(tokenizer) -> MarianMTModel:
    """A stock Marian with peaked attention (so a changed position signal shows; the tiny default init attends
    nearly uniformly, under which RoPE looks function-preserving) and a non-zero `final_logits_bias`."""
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(tokenizer))).eval()
    with torch.no_grad():
        for name, parameter in stock.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0.0, 0.5)
        stock.final_logits_bias.normal_()  # a trained OPUS-MT model has one
    return stock


@pytest.mark.parametrize("option,family,fields,preserved", ROWS, ids=[row[0] for row in ROWS])
def test_upgrade_at_step_0(option, family, fields, preserved, toy_tokenizer, tmp_path):
    stock = trained_looking_stock(toy_tokenizer)
    stock.save_pretrained(tmp_path)
    upgraded = FAMILIES[family].from_pretrained(tmp_path, **fields).eval()
    sources = ["the cat sees the dog", "a dog chases the small cat in the garden"]
    batch = dict(toy_tokenizer(sources, return_tensors="pt", padding=True))
    extra = {}
    if fields.get("pos_tagger"):
        generator = torch.Generator().manual_seed(1)
        tags = torch.randint(3, upgraded.config.num_source_tag_ids(), batch["input_ids"].shape, generator=generator)
        extra["pos_tag_ids"] = tags.masked_fill(batch["attention_mask"].eq(0), 0)
    with torch.no_grad():
        logits = upgraded(**batch, **extra, decoder_input_ids=batch["input_ids"]).logits
        expected = stock(**batch, decoder_input_ids=batch["input_ids"]).logits
        same_logits = torch.allclose(logits, expected, rtol=1e-5, atol=1e-5)
        outputs = {
            beams: (
                stock.generate(**batch, num_beams=beams, max_new_tokens=10),
                upgraded.generate(**batch, **extra, num_beams=beams, max_new_tokens=10),
            )
            for beams in (1, 3)
        }
    if preserved:
        assert same_logits, f"{option}: logits differ by {(logits - expected).abs().max():.2e}"
        for beams, (before, after) in outputs.items():
            assert torch.equal(before, after), f"{option}: {beams}-beam output differs"
    else:  # the row says it is not: show that it indeed computes another function
        assert not same_logits, f"{option} is function-preserving: the table says no"


@pytest.mark.parametrize("absolute", [True, False], ids=["beside-sinusoid", "alone"])
def test_rope_warm_start_ends_as_plain_rope_and_counts_training_passes_only(absolute, toy_tokenizer, tmp_path):
    """After S training forward passes the warm-started model computes what plain RoPE computes with the same
    weights; evaluation passes leave the schedule alone; the count is saved with the weights (a resumed run
    continues it), and halfway the blend sits between the two ends."""
    stock = trained_looking_stock(toy_tokenizer)
    stock.save_pretrained(tmp_path / "stock")
    rope = dict(xl_strategy="none", rotary_attention=True, absolute_positions=absolute)
    warm = XLPEMarianMTModel.from_pretrained(tmp_path / "stock", **rope, rotary_warm_start_steps=4)
    plain = XLPEMarianMTModel.from_pretrained(tmp_path / "stock", **rope).eval()
    batch = dict(toy_tokenizer(["the cat sees the dog", "a small dog"], return_tensors="pt", padding=True))
    batch["decoder_input_ids"] = batch["input_ids"]
    with torch.no_grad():
        stock_logits, plain_logits = stock(**batch).logits, plain(**batch).logits
        assert not torch.allclose(stock_logits, plain_logits, atol=1e-4)  # the two ends differ
        assert torch.allclose(warm.eval()(**batch).logits, stock_logits, atol=1e-5)  # eval: no pass counted
        warm.train()
        for _ in range(2):
            warm(**batch)
        warm.save_pretrained(tmp_path / "halfway")
        halfway = XLPEMarianMTModel.from_pretrained(tmp_path / "halfway").eval()
        middle = halfway(**batch).logits
        assert not torch.allclose(middle, stock_logits, atol=1e-4) and not torch.allclose(
            middle, plain_logits, atol=1e-4
        )
        halfway.train()
        for _ in range(2):
            halfway(**batch)
        halfway.eval()
        assert torch.allclose(halfway(**batch).logits, plain_logits, atol=1e-5)
        assert torch.equal(
            halfway.generate(**{k: batch[k] for k in ("input_ids", "attention_mask")}, num_beams=3, max_new_tokens=8),
            plain.generate(**{k: batch[k] for k in ("input_ids", "attention_mask")}, num_beams=3, max_new_tokens=8),
        )


def test_rope_warm_start_needs_rope():
    with pytest.raises(ValueError, match="rotary_warm_start_steps=10 fades RoPE in: it needs rotary_attention=True"):
        XLPEMarianMTModel.config_class(rotary_warm_start_steps=10)
