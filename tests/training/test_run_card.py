"""The card of an xlpe-train run says what was trained on what. A Multi30k slice prepared with
`xlpe-prepare --name`, trained from the prepared data with token batches and --max_steps, interrupted after 2 steps
and resumed to 4, scored on 5 of its 12 test sentences: every figure on the card is checked against the run, and
`xlpe-push` renders the card again with the Hub id."""

from __future__ import annotations

import json
import warnings

from conftest import TINY_MODEL_ARGS, write_multi30k_slice

from xlpe.cli import prepare, push, train
from xlpe.training.run_card import (
    CARD_INPUTS,
    TRANSLATIONS_FILE,
    dataset_label,
    describe_optimizer,
    training_settings,
)

TRAIN = [
    "--model_type",
    "xlpe",
    *TINY_MODEL_ARGS,
    "--eval_steps",
    "2",
    "--save_steps",
    "2",
    "--max_tokens",
    "400",
    "--val_max_target_length",
    "8",
    "--num_translation_examples",
    "0",
    "--report_to",
    "none",
    "--max_predict_samples",
    "5",
    "--max_eval_samples",
    "4",
    "--average_last_checkpoints",
    "1",
]


def test_the_card_describes_the_run_across_a_resume_and_is_rendered_again_for_the_hub(tmp_path, monkeypatch, capsys):
    write_multi30k_slice(tmp_path)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tokenizer trainer: more pieces asked than 120 pairs hold
        assert (
            prepare.main(
                [
                    "--source",
                    "train.de",
                    "--target",
                    "train.en",
                    "--validation_source",
                    "dev.de",
                    "--validation_target",
                    "dev.en",
                    "--test_source",
                    "test.de",
                    "--test_target",
                    "test.en",
                    "--source_lang",
                    "de",
                    "--target_lang",
                    "en",
                    "--name",
                    "Multi30k de-en slice",
                    "--output",
                    "prepared",
                ]
            )
            == 0
        )
        run = ["--prepared_dataset", "prepared", "--output_dir", "runs/de-en", *TRAIN]
        assert train.cli([*run, "--max_steps", "2"]) == 0
        first = json.loads((tmp_path / "runs/de-en/checkpoint-2/xlpe_elapsed.json").read_text())
        assert first["segments"] == 1 and first["seconds"] > 0
        assert train.cli([*run, "--max_steps", "4", "--resume_from_checkpoint", "last"]) == 0
    out = capsys.readouterr().out
    assert "xlpe-train: training ended at step 4: --max_steps 4 reached" in out
    folder = tmp_path / "runs/de-en"
    card = (folder / "README.md").read_text(encoding="utf-8")
    # the data: its recorded name (not the folder), pairs per split and the sentences scored
    assert "Multi30k de-en slice (de → en)." in card and "datasets:\n- Multi30k de-en slice" in card
    assert "| test | 12 | 12 | 0 | 5 |" in card and "| validation | 12 | 12 | 0 | 4 |" in card
    assert (
        "| Multi30k de-en slice | test | 5 | BLEU |" in card
        and "| Multi30k de-en slice | validation | 4 | BLEU |" in card
    )
    assert "prepared" not in card.split("## Data", 1)[1].split("**Preprocessing**", 1)[0]
    assert "**Preprocessing**: sub-words: trained here on the train split" in card and "word alignments: " in card
    # the arguments in force: token batches, the step budget and the steps run, the optimizer as run, both segments
    settings = dict(
        line.strip("| ").split(" | ", 1)
        for line in card.split("| setting | value |", 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    )
    assert settings["batches"] == "`token batches: --max_tokens 400 per device and step`"
    assert settings["max_steps"] == "`4` |" or settings["max_steps"].startswith("`4`")
    assert settings["steps run"].startswith("`4`") and "num_train_epochs" not in settings
    assert "per_device_train_batch_size" not in card
    assert settings["optimizer"].startswith("`AdamW (") and "adamw_torch_fused" not in card
    total = float(settings["training time"].strip("`| ").split(" s", 1)[0].replace(",", ""))
    assert "in 2 segments (resumed 1x)" in settings["training time"] and total >= first["seconds"] - 0.5
    # the test translations beside the card, and a test sentence as the usage example
    rows = (folder / TRANSLATIONS_FILE).read_text(encoding="utf-8").splitlines()
    test_sources = (tmp_path / "test.de").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "source\treference\ttranslation" and len(rows) == 1 + 5
    assert [row.split("\t")[0] for row in rows[1:]] == test_sources[:5]
    assert f'print(translator("{test_sources[0]}"))' in card and f"[`{TRANSLATIONS_FILE}`]({TRANSLATIONS_FILE})" in card
    # pushed: the usage example names the Hub repository; nothing else changes
    assert push.main([str(folder), "your-name/xlpe-de-en", "--dry_run"]) == 0
    pushed = (folder / "README.md").read_text(encoding="utf-8")
    assert 'pipeline("translation", model="your-name/xlpe-de-en", trust_remote_code=True)' in pushed
    assert pushed.replace("your-name/xlpe-de-en", "de-en") == card
    assert json.loads((folder / CARD_INPUTS).read_text())["card"]["repo_id"] == "your-name/xlpe-de-en"


def test_an_edited_card_is_left_alone_at_push(tmp_path):
    from xlpe.training.model_card import rerender_for_push

    (tmp_path / CARD_INPUTS).write_text(json.dumps({"card": {}, "readme_sha256": "0" * 64}))
    (tmp_path / "README.md").write_text("my own words\n")
    assert rerender_for_push(tmp_path, {"repo_id": "u/r"}) is False
    assert (tmp_path / "README.md").read_text() == "my own words\n"


def test_dataset_label_order_and_settings_without_token_batches():
    from types import SimpleNamespace

    args = SimpleNamespace(dataset_label=None, prepared_dataset=None, dataset_name="wmt16", dataset_config_name="de-en")
    assert dataset_label(args, {}) == "wmt16 (de-en)"
    assert dataset_label(SimpleNamespace(dataset_label="Mine", dataset_name="wmt16"), {}) == "Mine"
    files = SimpleNamespace(dataset_label=None, prepared_dataset="prepared", dataset_name=None)
    assert (
        dataset_label(files, {"train": {"source": "/data/m30k/train.fr", "target": "/data/m30k/train.en"}})
        == "m30k/train.fr + m30k/train.en"
    )
    training = SimpleNamespace(
        max_tokens=None,
        per_device_train_batch_size=64,
        max_steps=-1,
        num_train_epochs=3.0,
        learning_rate=1e-3,
        seed=1,
        optim="adamw_torch",
        bf16=False,
        fp16=False,
    )
    settings = training_settings(
        training, SimpleNamespace(), {"optimizer": "AdamW (fused=False)", "global_step": 90, "epoch": 3.0}
    )
    assert settings["batches"] == "64 sentence pairs per device and step" and settings["num_train_epochs"] == 3.0
    assert (
        "max_steps" not in settings
        and settings["optimizer"] == "AdamW (fused=False)"
        and settings["precision"] == "fp32"
    )


def test_describe_optimizer_reads_the_built_optimizer():
    import torch

    optimizer = torch.optim.AdamW(
        [torch.nn.Parameter(torch.zeros(2))], lr=1e-3, betas=(0.9, 0.98), eps=1e-9, fused=False
    )
    text = describe_optimizer(optimizer)
    assert text.startswith("AdamW (") and "fused=False" in text and "betas=(0.9, 0.98)" in text and "eps=1e-09" in text


# ---------------------------------------------------------------------------------------------------------
# Every option row of a real run's card is the value that ran: an XL PE run and a stock run, and after attach
# ---------------------------------------------------------------------------------------------------------


def _table(card: str, header: str) -> dict:
    """{first cell: second cell} of the Markdown table under `header` (backticks stripped)."""
    body = card.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    rows = {}
    for line in body:
        if not line.startswith("|"):
            break
        name, value = line.strip().strip("|").split(" | ", 1)
        rows[name.strip().strip("`")] = value.strip().strip("|").strip().strip("`").replace("\\|", "|")
    return rows


def _check_every_option_row(folder, built_optimizer, run_folder=None) -> dict:
    """Each row of the card's options table against what ran: the record's value, the input's digest, the
    tokenizer saved with the model, the optimizer the trainer built. Returns the rows."""
    from transformers import AutoTokenizer

    from xlpe.features.artefacts import read_record
    from xlpe.training.card_facts import OPTIMIZER_ROW, TOKENIZER_ROW

    card = (folder / "README.md").read_text(encoding="utf-8")
    rows = _table(card, "| option | value |")
    record = read_record(run_folder or folder)  # (the run's record: a folder attach wrote has none of its own)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    backend = tokenizer.backend_tokenizer
    for flag, value in rows.items():
        if flag == OPTIMIZER_ROW:
            assert value == f"{describe_optimizer(built_optimizer)} (as the trainer built it)", value
            inner = getattr(built_optimizer, "optimizer", built_optimizer)  # (inside accelerate's wrapper)
            assert value.startswith(type(inner).__name__ + " (") and f"fused={inner.defaults['fused']}" in value
        elif flag == TOKENIZER_ROW:
            kind = type(backend.model).__name__
            assert value.startswith(f"{kind}, {backend.get_vocab_size(with_added_tokens=False):,} pieces"), value
        elif value.startswith("sha256:"):
            assert value.startswith(f"sha256:{record.inputs[flag][:12]}"), (flag, value)
        else:
            assert json.loads(value) == record.options[flag], (flag, value, record.options[flag])
    assert OPTIMIZER_ROW in rows and TOKENIZER_ROW in rows
    return rows


def test_every_option_row_is_what_ran_for_an_xlpe_run_a_stock_run_and_after_attach(tmp_path, monkeypatch, capsys):
    from huggingface_hub import ModelCard

    import xlpe.training.run as run_module
    from xlpe.cli import reorder

    write_multi30k_slice(tmp_path)
    monkeypatch.chdir(tmp_path)
    built = []

    def recording(optimizer):
        built.append(optimizer)
        return describe_optimizer(optimizer)

    monkeypatch.setattr(run_module, "describe_optimizer", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        argv = ["--source", "train.de", "--target", "train.en", "--validation_source", "dev.de"]
        argv += ["--validation_target", "dev.en", "--test_source", "test.de", "--test_target", "test.en"]
        argv += ["--source_lang", "de", "--target_lang", "en", "--tokenizer-vocab-size", "150", "--output", "prepared"]
        assert prepare.main(argv) == 0
        # the nominal tokenizer flags a recipe would set: the prepared tokenizer is the one used
        nominal = ["--tokenizer_model", "bpe", "--tokenizer_vocab_size", "6000", "--max_steps", "2"]
        xl = ["--prepared_dataset", "prepared", "--output_dir", "xl", *TRAIN, *nominal, "--license", "cc-by-4.0"]
        assert train.cli(xl) == 0
        stock = ["--prepared_dataset", "prepared", "--output_dir", "stock", *TRAIN, *nominal]
        stock[stock.index("xlpe")] = "vanilla"
        assert train.cli(stock) == 0
    assert len(built) == 2
    for name, optimizer in (("xl", built[0]), ("stock", built[1])):
        rows = _check_every_option_row(tmp_path / name, optimizer)
        assert "--tokenizer_model" not in rows and "--tokenizer_vocab_size" not in rows
        saved = json.loads((tmp_path / name / "tokenizer.json").read_text())
        assert saved == json.loads((tmp_path / "prepared/tokenizer/tokenizer.json").read_text())  # (as prepared)
    xl_card, stock_card = (ModelCard.load(tmp_path / name / "README.md") for name in ("xl", "stock"))
    for card in (xl_card, stock_card):  # the summary table is one table (no blank line splits it)
        assert "|\n\n|" not in card.text.split("## Position encoding", 1)[0]
    assert xl_card.data.license == "cc-by-4.0" and stock_card.data.license is None  # --license, or none stated
    assert "| License | cc-by-4.0 |" in xl_card.text and "| License |" not in stock_card.text
    # the stock run: a card, naming the stock architecture, with the same facts; xlpe-push finds it
    assert "stock MarianMT architecture (`model_type: marian`)" in stock_card.text
    assert "xlpe_marian" not in stock_card.data.tags and "HeadXL" not in stock_card.text
    assert {r.metric_type for r in stock_card.data.eval_results} == {"bleu", "chrf"}
    assert _table(stock_card.text, "| setting | value |")["steps run"] == "2"
    capsys.readouterr()
    assert push.main([str(tmp_path / "stock"), "your-name/marian-de-en", "--dry_run"]) == 0
    assert json.loads(capsys.readouterr().out)["ready"]
    # the XL PE run before attach: the built-in predictor supplies the positions, its scores are the model's
    assert "| Predicted positions | supplied by the built-in reorder predictor |" in xl_card.text
    assert {r.metric_type for r in xl_card.data.eval_results} == {"bleu", "chrf"}
    # attach a reorderer (trained on the prepared data, its tokenizer): the card is rendered again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        argv = ["train", "--prepared", "prepared", "--output_dir", "reorderer", "--epochs", "1"]
        argv += ["--d-model", "16", "--token-layers", "1", "--word-layers", "1"]
        assert reorder.main(argv) == 0
        assert reorder.main(["attach", "--reorderer", "reorderer", "--model", "xl"]) == 0
    attached = ModelCard.load(tmp_path / "xl" / "README.md")
    assert "| Predicted positions | supplied by the attached reorderer (config sha256:" in attached.text
    assert "not the encoder's built-in predictor" in attached.text and "## Test-time reorderer" in attached.text
    assert "**These scores are not the shipped model's**" in attached.text
    assert "measured with the built-in reorder predictor supplying the" in attached.text
    assert attached.data.eval_results is None  # (the metadata claims no score of a model that was not scored)
    assert attached.data.license == "cc-by-4.0"
    _check_every_option_row(tmp_path / "xl", built[0])
    # attached into another folder: the card is rendered there from the model's record (no translations file there)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        argv = ["attach", "--reorderer", "reorderer", "--model", "xl", "--output_dir", "shipped"]
        assert reorder.main(argv) == 0
    shipped = (tmp_path / "shipped" / "README.md").read_text(encoding="utf-8")
    assert "**These scores are not the shipped model's**" in shipped and TRANSLATIONS_FILE not in shipped
    _check_every_option_row(tmp_path / "shipped", built[0], tmp_path / "xl")
    # pushed: rendered again from the record, the same facts
    assert push.main([str(tmp_path / "xl"), "your-name/xlpe-de-en", "--dry_run"]) == 0
    pushed = (tmp_path / "xl" / "README.md").read_text(encoding="utf-8")
    assert "**These scores are not the shipped model's**" in pushed and "license: cc-by-4.0" in pushed
