"""xlpe-translate: file or stdin in, translations out in input order, batched by length, blank lines kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, save_tiny_xlpe_model

from xlpe import XLPEMarianMTModel, XLPETranslationPipeline
from xlpe.cli.translate import length_sorted_batches, load_pipeline, main, translate_lines

REPO = REPO_ROOT
LINES = [
    "the cat sees the dog",
    "",
    "a dog chases the small cat in the garden",
    "children play",
    "  the man reads a book  ",
]


@pytest.fixture(scope="module")
def model_dir(toy_tokenizer, tmp_path_factory):
    return save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model"))


def one_by_one(model_dir, lines):
    model = XLPEMarianMTModel.from_pretrained(model_dir).eval()
    translator = XLPETranslationPipeline(model=model, tokenizer=load_pipeline(str(model_dir)).tokenizer)
    return [
        translator(" ".join(line.split()), num_beams=2, max_new_tokens=6)[0]["translation_text"].strip()
        if line.strip()
        else ""
        for line in lines
    ]


def test_file_in_file_out_matches_unbatched_pipeline(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "--model",
                str(model_dir),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "out.txt"),
                "--num_beams",
                "2",
                "--max_new_tokens",
                "6",
                "--batch_size",
                "2",
                "--quiet",
            ]
        )
        == 0
    )
    output = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(output) == len(LINES) and output[1] == ""
    assert output == one_by_one(model_dir, LINES)


def test_stdin_to_stdout_with_progress_on_stderr(model_dir):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlpe.cli.translate",
            "--model",
            str(model_dir),
            "--num_beams",
            "2",
            "--max_new_tokens",
            "4",
        ],
        input="the cat sees the dog\n\nchildren play\n",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.stdout.split("\n")) == 4 and run.stdout.split("\n")[1] == ""  # 3 lines + final newline
    assert "translating" in run.stderr  # the tqdm bar


def test_batches_are_longest_first_and_skip_blank_lines():
    lines = ["a b", "", "a b c d", "a", "a b c"]
    assert list(length_sorted_batches(lines, 2)) == [[2, 4], [0, 3]]


def test_bad_batch_size(model_dir):
    with pytest.raises(ValueError, match="--batch_size must be >= 1"):
        translate_lines(load_pipeline(str(model_dir)), ["a"], batch_size=0)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_translations_do_not_depend_on_the_file_or_batch(model_dir, num_beams):
    """The length rule: each line's own budget, so the same line translates alike alone, in any batch, any order."""
    translator = load_pipeline(str(model_dir), "cpu")
    lines = [line for line in LINES if line.strip()] + ["the dog sees a small cat in the big garden today"]
    alone = [translate_lines(translator, [line], 1, progress=False, num_beams=num_beams)[0] for line in lines]
    for batch_size in (2, 3):
        assert translate_lines(translator, lines, batch_size, progress=False, num_beams=num_beams) == alone
        assert translate_lines(translator, lines[::-1], batch_size, progress=False, num_beams=num_beams) == alone[::-1]


def test_too_long_inputs_and_outputs_at_the_limit_are_counted(toy_tokenizer, tmp_path, capsys):
    model = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model", model_max_length=16)  # positions: 64
    fits = " ".join(["the cat sees the dog"] * 3)  # > 16 tokens: no warning, the model takes it
    too_long = " ".join(["the small cat sees the dog"] * 12)
    (tmp_path / "in.txt").write_text("\n".join(["children play", too_long, fits, "", too_long]) + "\n", "utf-8")
    assert (
        main(["--model", str(model), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o"), "--quiet"])
        == 0
    )
    err = capsys.readouterr().err
    assert "Token indices sequence length" not in err
    assert "xlpe-translate: warning: 2 of 4 lines are longer than the model's limit (64 tokens" in err
    assert err.split("longer than the model's limit")[1].split("\n")[0].endswith(": line 2, 5")
    # an untrained model never ends on its own: every translation reaches its budget, and is reported
    assert "xlpe-translate: warning: 4 of 4 translations reached their length limit before ending" in err
    assert ": line 1, 2, 3, 5" in err


def test_a_model_saved_without_the_cache_is_named(toy_tokenizer, tmp_path, caplog):
    """A generation_config.json with `use_cache: false` (as the Trainer used to leave after a resume) decodes 16x
    slower on long sentences: xlpe-translate (through the pipeline) says so once, and still translates."""
    import json

    model = save_tiny_xlpe_model(toy_tokenizer, tmp_path / "model")
    config = model / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "use_cache": False}))
    (tmp_path / "in.txt").write_text("the cat sees the dog\nchildren play\n", encoding="utf-8")
    arguments = ["--model", str(model), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.txt")]
    with caplog.at_level("WARNING"):  # (the pipeline's logger: on stderr outside pytest)
        assert main([*arguments, "--batch_size", "1", "--quiet"]) == 0
    said = [r.getMessage() for r in caplog.records if "decodes without the key/value cache" in r.getMessage()]
    assert len(said) == 1, caplog.text  # once, not per batch
    assert len((tmp_path / "o.txt").read_text().splitlines()) == 2
