"""Every family, uploaded to a local Hub endpoint with `push_model`, translates raw text through
`pipeline("translation", trust_remote_code=True)` in a fresh process where xlpe cannot be imported: the
remote code the upload carries (`xlpe/models/`, flat, single-dot imports) is complete whatever the package
layout. The same output as the in-memory model, token for token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from family_tester import registry_family_tests
from local_hub import FRESH_PROCESS_SCRIPT, local_hub_endpoint

from xlpe import XLPETranslationPipeline
from xlpe.models.registry import MODEL_FAMILIES
from xlpe.training.push import push_model

TESTERS = {name: registry_family_tests(name) for name in MODEL_FAMILIES}  # every registered family
SENTENCE = "the cat sees the dog"


@pytest.mark.parametrize(
    "family",
    [
        # each family's fresh-process pipeline also runs in its FamilyTests (test_fresh_process_remote_code_...);
        # through a local Hub, by default: the XL PE model carrying its reorderer (the most remote code)
        *(pytest.param(name, marks=pytest.mark.slow) for name in sorted(TESTERS)),
        "xlpe+reorderer",
        pytest.param("xlpe+relative", marks=pytest.mark.slow),
        pytest.param("xlpe+pos", marks=pytest.mark.slow),
    ],
)
def test_pushed_family_translates_in_a_process_without_the_package(family, toy_tokenizer, tmp_path, shared_dir):
    # xlpe+relative: the paper's baselines stacked on XL PE travel as remote code too (position_attention.py);
    # xlpe+pos: source POS tags, whose pipeline tags raw text (source_tags.py, pos_tagging_hub.py)
    overrides = {
        "xlpe+relative": {"relative_attention_max_distance": 3, "directional_attention": True},
        "xlpe+pos": {"pos_tagger": "nltk-en", "nltk_data": str(shared_dir / "data" / "nltk_data")},
    }.get(family, {})
    model = TESTERS[family.split("+")[0]]().make_model(toy_tokenizer, **overrides).eval()
    if family == "xlpe+reorderer":  # the standalone reorderer rides inside the checkpoint (its remote code too)
        import torch

        from xlpe.training.reorderer import build_reorderer

        torch.manual_seed(0)
        reorderer = build_reorderer(toy_tokenizer, d_model=32, ffn_dim=64, pair_dim=16, token_layers=1, word_layers=1)
        with torch.no_grad():
            reorderer.query.weight.normal_(0, 3.0), reorderer.key.weight.normal_(0, 3.0)
        model.attach_reorderer(reorderer)
        ids = toy_tokenizer([SENTENCE], return_tensors="pt").input_ids
        assert torch.equal(model.get_encoder()(ids).reorder_positions, reorderer.eval().predict_positions(ids))
    if family == "mvpe_pos":  # its pipeline tags raw text with NLTK: the shared data's offline model
        model.config.nltk_data = str(shared_dir / "data" / "nltk_data")
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    toy_tokenizer.save_pretrained(folder)
    expected = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)(SENTENCE, num_beams=2, max_new_tokens=6)
    repo_id = f"xlpe-tests/{family.replace('+', '-')}-tiny"
    with local_hub_endpoint(tmp_path / "hub") as hub:
        push_model(folder, repo_id, card_kwargs={"repo_id": repo_id, "languages": ["en", "de"]})
    assert hub.unexpected == []
    received = hub.repo_dir(repo_id)
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FRESH_PROCESS_SCRIPT), str(received), SENTENCE],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=received,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["class"] == "XLPETranslationPipeline" and result["module"].startswith("transformers_modules")
    assert result["result"] == expected
