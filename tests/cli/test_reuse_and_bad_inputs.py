"""The model-side commands: a reused model folder, links file, order file, tagger input or Hub push never
gives a silently wrong result. Each test plays the user's sequence through the console script's `main` (in
process) or the public API and asserts one error line and exit status 2, or the correct result, with nothing
lost or changed."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_MODEL_ARGS, TOY_SENTENCES, save_tiny_xlpe_model

from xlpe.evaluation.model_loading import record_tokenizer_fingerprint


def one_error_line(capsys, prog: str) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[transformers]")]
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
    return err[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path -> SHA-256 of its bytes)."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def model_dir(toy_tokenizer, tmp_path_factory):
    """A tiny XL PE model folder whose config records its tokenizer, as xlpe-train saves it."""
    from transformers import AutoConfig

    directory = save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model") / "de-en")
    config = AutoConfig.from_pretrained(directory)
    record_tokenizer_fingerprint(config, toy_tokenizer)
    config.save_pretrained(directory)
    return directory


def translate(model, tmp_path, *extra: str, lines=("the cat sees the dog", "children play")) -> tuple[int, Path]:
    from xlpe.cli.translate import main

    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    status = main(
        [
            "--model",
            str(model),
            "--input",
            str(source),
            "--output",
            str(output),
            "--num_beams",
            "1",
            "--max_new_tokens",
            "4",
            "--quiet",
            "--device",
            "cpu",
            *extra,
        ]
    )
    return status, output


# ------------------------------------------------------------------------------ 1. a replaced tokenizer


def test_a_replaced_tokenizer_is_refused_and_the_flag_overrides(model_dir, tmp_path, capsys):
    import shutil

    from xlpe.features.tokenization import train_joint_tokenizer

    folder = tmp_path / "de-en"
    shutil.copytree(model_dir, folder)
    other = train_joint_tokenizer([s.upper() for s in TOY_SENTENCES] * 4, vocab_size=40)  # other pieces, fewer ids
    other.save_pretrained(folder)  # the user copies another run's tokenizer over the model's
    status, output = translate(folder, tmp_path)
    message = one_error_line(capsys, "xlpe-translate")
    assert status == 2 and not output.exists()
    assert "tokenizer_fingerprint" in message and "--ignore_tokenizer_mismatch" in message and str(folder) in message
    status, output = translate(folder, tmp_path, "--ignore_tokenizer_mismatch")
    assert status == 0 and len(output.read_text(encoding="utf-8").split("\n")) == 3
    assert translate(model_dir, tmp_path, "--overwrite_output")[0] == 0  # the model's own tokenizer: no complaint


def test_xlpe_train_records_its_tokenizer_and_translate_refuses_another(tmp_path, toy_tokenizer, capsys):
    """The whole sequence: xlpe-train saves a model, the user copies another tokenizer over its own, translates."""
    from xlpe.training.run import main as train

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps({"translation": {"en": en, "de": de}, "alignment": "0-0 1-1 2-2"}) + "\n"
            for en, de in zip(TOY_SENTENCES[0::2], TOY_SENTENCES[1::2])
        )
        * 4
    )
    train(
        [
            "--output_dir",
            str(tmp_path / "run"),
            "--model_type",
            "xlpe",
            "--train_file",
            str(jsonl),
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--do_train",
            "--max_steps",
            "1",
            *TINY_MODEL_ARGS,
            "--tokenizer_vocab_size",
            "200",
            "--per_device_train_batch_size",
            "4",
            "--report_to",
            "none",
            "--tokenizer_model",
            "bpe",
        ]
    )
    assert json.loads((tmp_path / "run" / "config.json").read_text())["tokenizer_fingerprint"]
    toy_tokenizer.save_pretrained(tmp_path / "run")  # another run's tokenizer (smaller: fits the vocabulary)
    capsys.readouterr()
    assert translate(tmp_path / "run", tmp_path)[0] == 2
    assert "not the one the model was trained with" in one_error_line(capsys, "xlpe-translate")


def test_an_attached_reorderer_fingerprint_is_checked_too(model_dir, toy_tokenizer):
    from xlpe import XLPEMarianMTModel
    from xlpe.evaluation.model_loading import ModelLoadError, check_model_tokenizer

    model = XLPEMarianMTModel.from_pretrained(model_dir)
    model.config.tokenizer_fingerprint = None
    model.config.reorderer_config = {"tokenizer_fingerprint": "0" * 16}
    with pytest.raises(ModelLoadError, match="reorderer_config.tokenizer_fingerprint"):
        check_model_tokenizer(model, toy_tokenizer, "m")
    check_model_tokenizer(model, toy_tokenizer, "m", ignore_mismatch=True)


def test_left_padding_or_a_larger_tokenizer_is_refused(model_dir, tmp_path, capsys):
    import shutil

    from xlpe.features.tokenization import train_joint_tokenizer

    left = tmp_path / "left"
    shutil.copytree(model_dir, left)
    settings = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**settings, "padding_side": "left"}))
    assert translate(left, tmp_path)[0] == 2
    assert "pads on the left" in one_error_line(capsys, "xlpe-translate")
    larger = tmp_path / "larger"
    shutil.copytree(model_dir, larger)
    words = " ".join(f"w{k}x{k * 7}" for k in range(300))
    train_joint_tokenizer([words] * 4 + TOY_SENTENCES, vocab_size=400, model="bpe").save_pretrained(larger)
    assert translate(larger, tmp_path, "--ignore_tokenizer_mismatch")[0] == 2  # the flag cannot make ids fit
    assert "vocab_size" in one_error_line(capsys, "xlpe-translate")


# ------------------------------------------------------------------------------ 2. --trust_remote_code


def test_trust_remote_code_runs_the_folders_own_code(model_dir, tmp_path, monkeypatch):
    import shutil

    import xlpe.cli.translate as translate_cli

    folder = tmp_path / "edited"
    shutil.copytree(model_dir, folder)
    with open(folder / "modeling_xlpe.py", "a", encoding="utf-8") as handle:  # the folder's code marks its class
        handle.write("\n\nXLPEMarianMTModel.folder_code_mark = 'edited in the folder'\n")
    used = []
    real = translate_cli.translate_lines
    monkeypatch.setattr(
        translate_cli,
        "translate_lines",
        lambda translator, *a, **k: used.append(type(translator.model)) or real(translator, *a, **k),
    )
    assert translate(folder, tmp_path, "--trust_remote_code")[0] == 0
    assert getattr(used[-1], "folder_code_mark", None) == "edited in the folder"
    assert translate(folder, tmp_path, "--overwrite_output")[0] == 0  # without the flag: the installed package's class
    assert not hasattr(used[-1], "folder_code_mark") and used[-1].__module__.startswith("xlpe.")


# ------------------------------------------------------------------------------ 3. a mistyped model path


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("d_model", -4, "d_model must be an integer >= 1, got -4"),
        ("encoder_layers", "two", "expected int"),
        ("xl_strategy", "bogus", "xl_strategy must be one of"),
    ],
)
def test_a_hand_edited_config_is_one_line_naming_the_file(model_dir, tmp_path, capsys, field, value, words):
    """A config.json edited by hand into values no model can be built from: one line naming the file, exit 2."""
    edited = tmp_path / "edited"
    shutil.copytree(model_dir, edited)
    config = json.loads((edited / "config.json").read_text())
    config[field] = value
    (edited / "config.json").write_text(json.dumps(config))
    status, output = translate(edited, tmp_path)
    message = one_error_line(capsys, "xlpe-translate")
    assert status == 2 and f"{edited / 'config.json'}: no model can be built" in message and words in message, message
    assert not output.exists()


def test_a_mistyped_local_path_is_named_as_missing_not_as_a_failed_download(tmp_path, monkeypatch, capsys):
    from xlpe.cli.translate import main

    (tmp_path / "runs" / "de-en").mkdir(parents=True)
    (tmp_path / "in.txt").write_text("a\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for typo in ("runs/de-en-typo", "./de-en", "~/no-such-xlpe-model"):
        assert main(["--model", typo, "--input", "in.txt", "--quiet"]) == 2
        message = one_error_line(capsys, "xlpe-translate")
        assert f"{typo}: no such local directory" in message and "huggingface.co" not in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: a Hub-shaped name is a missing directory too
    assert main(["--model", "run/de-en", "--input", "in.txt", "--quiet"]) == 2
    assert "run/de-en: no such local directory" in one_error_line(capsys, "xlpe-translate")


def test_a_name_neither_local_nor_on_the_hub_says_both(tmp_path, monkeypatch, capsys):
    from transformers import PretrainedConfig

    from xlpe.cli.translate import main

    def unreachable(name, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection.")

    monkeypatch.setattr(PretrainedConfig, "get_config_dict", unreachable)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("a\n")
    assert main(["--model", "ghost/de-en", "--input", "in.txt", "--quiet"]) == 2
    message = one_error_line(capsys, "xlpe-translate")
    assert "ghost/de-en: no such local directory, and no model of that name could be loaded from the Hub" in message


# ------------------------------------------------------------------------------ 4. links and orders read back


@pytest.fixture
def gold_dir(tmp_path):
    folder = tmp_path / "gold" / "de_en"
    folder.mkdir(parents=True)
    (folder / "t.src-tgt").write_text("a b c ||| x y z\nd e ||| u v\nf ||| w\n", encoding="utf-8")
    (folder / "t.gold").write_text("1-1 2-2 3-3\n1-2 2p1\n1-1\n", encoding="utf-8")
    return folder


def test_alignment_links_must_match_the_gold_lines_and_sentences(gold_dir, tmp_path, capsys):
    from xlpe.cli.evaluate import main

    links = tmp_path / "links.txt"
    run = lambda *extra: main(["alignment", "--gold_dir", str(gold_dir), "--links", str(links), *extra])
    links.write_text("0-0 1-1 2-2\n0-1 1-0\n0-0\n")
    assert run() == 0
    assert json.loads(capsys.readouterr().out)["aer"] == 0.0
    links.write_text("\n0-0 1-1 2-2\n0-1 1-0\n0-0\n")  # one line too many: every line shifted
    assert run() == 2
    message = one_error_line(capsys, "xlpe-evaluate")
    assert "links.txt has 4 lines" in message and "t.gold have 3" in message
    links.write_text("0-0 1-1 2-2\n0-1 5-0\n0-0\n")  # a link outside sentence 2 (2 source words)
    assert run() == 2
    assert "links.txt:2: link 5-0 lies outside the sentence pair" in one_error_line(capsys, "xlpe-evaluate")
    links.write_text("1-1 2-2 3-3\n1-2 2-1\n1-1 1-2\n")  # 1-based: target word 2 of a 1-word sentence
    assert run("--one_based") == 2
    assert "links.txt:3: link 1-2 lies outside" in one_error_line(capsys, "xlpe-evaluate")
    links.write_text("0-0 1-1 2-2\n0-1 1-0\n")
    assert run("--limit", "2") == 0  # with --limit N: N lines, or the whole set
    capsys.readouterr()


def test_reordering_predictions_must_be_permutations(tmp_path, capsys):
    from xlpe.cli.evaluate import main

    pred, oracle = tmp_path / "pred.txt", tmp_path / "oracle.txt"
    oracle.write_text("0 1 2\n1 0\n")
    pred.write_text("0 2 1\n1 0\n")
    assert main(["reordering", "--pred", str(pred), "--oracle", str(oracle)]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 2
    for bad in ("0 0 2\n1 0\n", "0 1 2\n1 2\n"):  # a repeated position; a position past the sentence
        pred.write_text(bad)
        assert main(["reordering", "--pred", str(pred), "--oracle", str(oracle)]) == 2
        message = one_error_line(capsys, "xlpe-evaluate")
        assert "pred.txt:" in message and "not a permutation" in message


def test_reordering_links_must_match_the_source(model_dir, tmp_path, capsys):
    from xlpe.cli.evaluate import main

    (tmp_path / "src.txt").write_text("the cat sees\nchildren play\n")
    (tmp_path / "links.txt").write_text("0-0 1-1 2-2\n0-0 1-1\n0-0\n")
    argv = [
        "reordering",
        "--model",
        str(model_dir),
        "--source",
        str(tmp_path / "src.txt"),
        "--links",
        str(tmp_path / "links.txt"),
    ]
    assert main(argv) == 2
    assert "line counts differ" in one_error_line(capsys, "xlpe-evaluate")
    (tmp_path / "links.txt").write_text("0-0 1-1 2-2\n0-0 7-1\n")
    assert main(argv) == 2
    assert "links.txt:2: link 7-1 lies outside" in one_error_line(capsys, "xlpe-evaluate")


# ------------------------------------------------------------------------------ 5. tagger input lines


CONLLU = """# text = the cat sees the dog
1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsees\tsee\tVERB\tVBZ\t_\t0\troot\t_\t_
4\tthe\tthe\tDET\tDT\t_\t5\tdet\t_\t_
5\tdog\tdog\tNOUN\tNN\t_\t3\tobj\t_\t_

"""


def test_tagger_tag_keeps_one_output_line_per_input_line(tmp_path, monkeypatch, capsys):
    from xlpe.cli.tagger import main

    (tmp_path / "t.conllu").write_text(
        "# a comment with a bare \r inside and a \u2028 too\n" + CONLLU * 3, encoding="utf-8"
    )
    assert (
        main(
            ["train", "--conllu", str(tmp_path / "t.conllu"), "--output", str(tmp_path / "t.json"), "--iterations", "1"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["sentences"] == 3  # the comment's \r and U+2028 split nothing
    text = "the cat\rsees the dog\n\nthe\u2028dog\x0csees\x1cthe cat\nthe dog\r\n"  # 4 lines (the last CRLF)
    (tmp_path / "in.txt").write_text(text, encoding="utf-8", newline="")
    assert (
        main(
            [
                "tag",
                "--tagger",
                str(tmp_path / "t.json"),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "tags.txt"),
            ]
        )
        == 0
    )
    tags = (tmp_path / "tags.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(tags) == 4 and tags[1] == "" and len(tags[0].split()) == 5 and len(tags[3].split()) == 2
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))
    assert main(["tag", "--tagger", str(tmp_path / "t.json"), "--input", "-"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == tags


# ------------------------------------------------------------------------------ 6. the collator reads every example


def test_collator_refuses_an_extra_key_missing_from_some_examples(toy_tokenizer):
    from xlpe.training.collator import ExtraInputsDataCollator

    collator = ExtraInputsDataCollator(toy_tokenizer)
    example = lambda n, **extra: {"input_ids": list(range(3, 3 + n)), "labels": list(range(3, 3 + n)), **extra}
    both = [example(3, pos_tag_ids=[1, 2, 3]), example(2, pos_tag_ids=[4, 5])]
    assert collator(both)["pos_tag_ids"].tolist() == [[1, 2, 3], [4, 5, 0]]
    with pytest.raises(ValueError, match=r"example 0 has no `pos_tag_ids` but example 1 has"):
        collator([example(3), example(2, pos_tag_ids=[4, 5])])  # was silently dropped
    with pytest.raises(ValueError, match=r"example 2 has no `reorder_positions` but example 0 has"):
        collator(
            [example(2, reorder_positions=[1, 0]), example(1, reorder_positions=[0]), example(2)]
        )  # was a KeyError


# ------------------------------------------------------------------------------ 8. xlpe-push that cannot happen


@pytest.fixture
def push_folder(model_dir, tmp_path):
    import shutil

    folder = tmp_path / "push" / "de-en"
    shutil.copytree(model_dir, folder)  # no README.md yet: a push would write the model card into it
    return folder


def test_push_offline_or_without_token_changes_nothing(push_folder, monkeypatch, capsys):
    import huggingface_hub

    from xlpe.cli.push import main

    before = snapshot(push_folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([str(push_folder), "me/de-en", "--language", "de", "en"]) == 2
    assert "HF_HUB_OFFLINE" in one_error_line(capsys, "xlpe-push")
    assert snapshot(push_folder) == before
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert main([str(push_folder), "me/de-en", "--language", "de", "en"]) == 2
    assert "no Hub token" in one_error_line(capsys, "xlpe-push")
    assert snapshot(push_folder) == before


def test_push_to_an_unreachable_hub_changes_nothing(push_folder, monkeypatch, capsys):
    import socket

    from xlpe.cli.push import main

    with socket.socket() as probe:  # a loopback port with nobody listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = snapshot(push_folder)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert main([str(push_folder), "me/de-en", "--token", "hf_x", "--endpoint", f"http://127.0.0.1:{port}"]) == 2
    message = one_error_line(capsys, "xlpe-push")
    assert "could not be reached" in message and "nothing was written" in message
    assert snapshot(push_folder) == before


def test_push_of_a_folder_without_tokenizer_changes_nothing(push_folder, monkeypatch, capsys):
    from xlpe.cli.push import main

    (push_folder / "tokenizer.json").unlink()
    before = snapshot(push_folder)
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert main([str(push_folder), "me/de-en", "--endpoint", "http://127.0.0.1:9"]) == 2
    assert "tokenizer is missing" in one_error_line(capsys, "xlpe-push")
    assert snapshot(push_folder) == before
