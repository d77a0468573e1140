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
