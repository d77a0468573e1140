"""Issue 57, item 2: which options upgrade a trained sinusoidal MarianMT checkpoint function-preservingly.

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
from xlpe.models.modeling_dpe import DPEMarianMTModel

FAMILIES = {"xlpe": XLPEMarianMTModel, "dpe": DPEMarianMTModel}
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


@pytest.mark.parametrize("option,family,fields,preserved", ROWS, ids=[row[0] for row in ROWS])
def test_upgrade_at_step_0(option, family, fields, preserved, toy_tokenizer, tmp_path):
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    with torch.no_grad():  # trained-looking weights: peaked attention, so a changed position signal shows
        for name, parameter in stock.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0.0, 0.5)
        stock.final_logits_bias.normal_()  # a trained OPUS-MT model has one
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
