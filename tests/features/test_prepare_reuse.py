"""Reruns and reused artefacts of `xlpe-prepare` never give silently wrong results: input files edited
after planning are refused at every stage, a damaged shard is made anew by the command the error advises, a
damaged plan.json is one line naming file and line, cache keys are digests of unambiguous encodings, and the
word-piece cache gives the ids the tokenizer call gives."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import datasets
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features import sharded
from xlpe.features.artefacts import RECORD_NAME
from xlpe.features.cache import _fingerprint, tokenizer_cache_key
from xlpe.features.corpus import ParallelSplit
from xlpe.features.synthetic import generate_corpus

TOKENIZER = {"vocab_size": 300, "model": "bpe"}
OPTIONS = dict(keep_text=True, seed=3)


def write_corpus(folder: Path, size: int = 300) -> dict:
    sources, targets, links = generate_corpus(size, seed=5)
    files = {}
    for side, lines in (("source", sources), ("target", targets), ("alignments", links)):
        files[side] = str(folder / f"train.{side}")
        Path(files[side]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"train": files}


def plan(work: Path, files: dict, **extra) -> dict:
    return sharded.plan_preparation(work, files, shard_size=100, tokenizer_options=TOKENIZER, **OPTIONS, **extra)


def edit_line(path: str, index: int, text: str) -> None:
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    lines[index] = text
    Path(path).write_text("\n".join(lines), encoding="utf-8")


def test_input_edited_after_planning_is_refused_by_every_stage(tmp_path):
    """plan -> a source line edited in place (same word count: its old links still 'fit') -> the shard holding it
    is refused naming file and lines; a finished shard's lines edited -> merge refuses naming the file; the plan
    stage itself refuses too, and --overwrite-work-dir (overwrite_work_dir) plans anew."""
    files = write_corpus(tmp_path)
    work = tmp_path / "work"
    first = plan(work, files)
    sharded.run_shards(work, first, [0], progress=False)
    source = files["train"]["source"]
    words = Path(source).read_text(encoding="utf-8").split("\n")[150].split()
    edit_line(source, 150, " ".join(reversed(words)) if len(set(words)) > 1 else "x " * len(words))
    with pytest.raises(
        ValueError,
        match=rf"{re.escape(source)}: lines 101-200 changed since the plan was made.*--stage plan --overwrite-work-dir",
    ):
        sharded.run_shards(work, sharded.load_plan(work), [1], progress=False)
    edit_line(source, 150, " ".join(words))  # restored: the shards run ...
    sharded.run_shards(work, sharded.load_plan(work), progress=False)
    edit_line(source, 5, "edited after its shard was made")  # ... then a finished shard's line changes
    with pytest.raises(ValueError, match=rf"{re.escape(source)}: changed since the plan was made \(SHA-256"):
        sharded.merge_shards(work, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(
        ValueError, match=rf"{re.escape(source)}: changed since the plan in .* was made from it .*--overwrite-work-dir"
    ):
        plan(work, files)
    again = plan(work, files, overwrite_work_dir=True)
    assert again["splits"]["train"]["sha256"] != first["splits"]["train"]["sha256"] and not sharded.finished_shards(
        work, again
    )


def test_damaged_shard_is_made_anew_by_the_advised_command(tmp_path):
    """The user's sequence: shards done, one shard file damaged, merge refuses advising `--stage shards
    --shard-index K`; running exactly that makes the shard anew, and the merged dataset is the undamaged one."""
    files = write_corpus(tmp_path)
    work = tmp_path / "work"
    reference, _ = sharded.prepare_in_shards(
        tmp_path / "ref.work",
        tmp_path / "ref",
        files,
        shard_size=100,
        tokenizer_options=TOKENIZER,
        progress=False,
        **OPTIONS,
    )
    first = plan(work, files)
    sharded.run_shards(work, first, progress=False)
    arrow = next((work / "shards" / "00001" / "data").glob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:-16])
    with pytest.raises(ValueError, match=r"shard 1 \(damaged: .*--stage shards --shard-index 1 ") as refused:
        sharded.merge_shards(work, tmp_path / "out")
    advised = [int(k) for k in re.search(r"--shard-index ([\d ]+) \(", str(refused.value)).group(1).split()]
    assert sharded.run_shards(work, sharded.load_plan(work), advised, progress=False) == [1]
    output, _ = sharded.merge_shards(work, tmp_path / "out")
    got, expected = datasets.load_from_disk(str(output))["train"], datasets.load_from_disk(str(reference))["train"]
    assert got.to_dict() == expected.to_dict()


def test_a_shard_of_another_plan_is_not_merged(tmp_path):
    """A shard copied in from another work directory (other lines) is named at merge and made anew."""
    files = write_corpus(tmp_path)
    (tmp_path / "other").mkdir()
    other = write_corpus(tmp_path / "other", size=320)
    work, foreign = tmp_path / "work", tmp_path / "foreign"
    sharded.run_shards(work, plan(work, files), progress=False)
    sharded.run_shards(foreign, plan(foreign, other), [0], progress=False)
    target = work / "shards" / "00000"
    os.rename(target, tmp_path / "kept")
    os.rename(foreign / "shards" / "00000", target)
    with pytest.raises(ValueError, match=r"shard 0 \(made for another plan or lines \(input plan\)\)"):
        sharded.merge_shards(work, tmp_path / "out")
    assert sharded.run_shards(work, sharded.load_plan(work), [0], progress=False) == [0]


def run_prepare(capsys, *args) -> tuple[int, str]:
    """`xlpe-prepare ARGS` in this process: (exit status, stderr)."""
    from xlpe.cli.prepare import main

    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err


def test_cli_edited_input_and_damaged_plan_are_one_line_errors(tmp_path, capsys):
    files = write_corpus(tmp_path)
    flags = [
        "--source",
        files["train"]["source"],
        "--target",
        files["train"]["target"],
        "--alignments",
        files["train"]["alignments"],
        "--output",
        str(tmp_path / "out"),
        "--tokenizer-model",
        "bpe",
        "--tokenizer-vocab-size",
        "300",
        "--shard-size",
        "100",
    ]
    assert run_prepare(capsys, *flags, "--stage", "plan")[0] == 0
    edit_line(files["train"]["target"], 3, "an edited line")
    for stage, message in (
        ("shards", r"train\.target: lines 1-100 changed since the plan was made"),
        ("plan", r"train\.target: changed since the plan in .* --overwrite-work-dir"),
    ):
        status, stderr = run_prepare(capsys, *flags, "--stage", stage)
        assert status == 2 and re.search(message, stderr), (stage, stderr)
        assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert run_prepare(capsys, *flags, "--stage", "plan", "--overwrite-work-dir")[0] == 0
    plan_file = tmp_path / "out.work" / "plan.json"
    whole = plan_file.read_text(encoding="utf-8")
    plan_file.write_text(whole[:200] + "\n\n", encoding="utf-8")
    status, stderr = run_prepare(capsys, *flags, "--stage", "shards")
    assert status == 2 and re.search(rf"{re.escape(str(plan_file))}:\d+: not a valid plan", stderr), stderr
    assert len(stderr.strip().splitlines()) == 1
    plan_file.write_text(whole, encoding="utf-8")
    (tmp_path / "out.work" / RECORD_NAME).write_text("{", encoding="utf-8")
    status, stderr = run_prepare(capsys, *flags, "--stage", "plan")
    assert status == 2 and "xlpe_artefact.json:1: not a valid artefact record" in stderr, stderr
    status, stderr = run_prepare(capsys, *flags, "--stage", "merge", "--overwrite-work-dir")
    assert status == 2 and "--overwrite-work-dir replaces the plan: give it with --stage plan" in stderr, stderr


def test_a_plan_of_an_older_version_or_without_record_is_refused(tmp_path):
    files = write_corpus(tmp_path)
    work = tmp_path / "work"
    plan(work, files)
    (work / RECORD_NAME).unlink()
    with pytest.raises(ValueError, match=r"holds no record .* --overwrite-work-dir"):
        sharded.load_plan(work)
    data = json.loads((work / "plan.json").read_text())
    data["request"]["plan_version"] = 1
    (work / "plan.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"plan\.json: a plan of another xlpe version \(plan version 1, now 2\)"):
        sharded.load_plan(work)


# ----------------------------------------------------------------------------------------------------------
# Cache keys: digests of unambiguous encodings
# ----------------------------------------------------------------------------------------------------------

texts = st.lists(st.text(alphabet=st.sampled_from("ab \n\0"), max_size=6), max_size=4)


class _Tokenizer:  # what _fingerprint needs of a tokenizer (tokenizer_fingerprint: the vocabulary)
    def get_vocab(self):
        return {"a": 0}


@settings(max_examples=200, deadline=None)
@given(texts, texts, texts, texts)
def test_preparation_cache_keys_never_collide_where_a_join_did(sources_a, sources_b, targets_a, targets_b):
    """Different inputs that the old key ("\\n".join of the lines) could confuse get different keys."""
    first = {"train": ParallelSplit(sources_a, targets_a, "", "")}
    second = {"train": ParallelSplit(sources_b, targets_b, "", "")}
    same = (sources_a, targets_a) == (sources_b, targets_b)
    assert (_fingerprint(first, _Tokenizer(), {}) == _fingerprint(second, _Tokenizer(), {})) == same
    assert (tokenizer_cache_key(sources_a + targets_a, {}) == tokenizer_cache_key(sources_b + targets_b, {})) == (
        sources_a + targets_a == sources_b + targets_b
    )


def test_the_old_join_collisions_get_different_keys():
    tokenizer = _Tokenizer()
    key = lambda sources: _fingerprint({"train": ParallelSplit(sources, ["x"] * len(sources), "", "")}, tokenizer, {})  # noqa: E731
    assert key(["a\nb"]) != key(["a", "b"])
    assert tokenizer_cache_key(["a\nb"], {}) != tokenizer_cache_key(["a", "b"], {})
    assert tokenizer_cache_key(["a"], {}) != tokenizer_cache_key(["a", ""], {})
    split_names = lambda name, text: _fingerprint({name: ParallelSplit([text], [text], "", "")}, tokenizer, {})  # noqa: E731
    assert split_names("train", "ab") != split_names("traina", "b")


# ----------------------------------------------------------------------------------------------------------
# The word-piece cache gives the ids the tokenizer gives at translation time
# ----------------------------------------------------------------------------------------------------------

TRAINING_TEXT = ["the cat sees the dog.", "Der Hund, die Katze!", "naïve café — “quoted” ﬁne", "日本語 テキスト"] * 20
PIECES = list("ab cdeé.,!?-'\"“”…ﬁ日本\t") + [
    "\u00b4",
    "\u00a8",
    "\u0301",
    "\u2581",
    "\ufdfa",
    "\u3000",
    "\u00a0",
    "\u2028",
    "\u200b",
    "</s>",
    "<unk>",
    "<pad>",
    "  ",
]
raw_lines = st.lists(st.lists(st.sampled_from(PIECES), max_size=12).map("".join), min_size=1, max_size=5)


@pytest.fixture(scope="module")
def tokenizers():
    import warnings

    from xlpe.features.tokenization import train_joint_tokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny corpus: fewer pieces than asked for
        return [train_joint_tokenizer(TRAINING_TEXT, vocab_size=120, model=model) for model in ("unigram", "bpe")]


@settings(max_examples=300, deadline=None)
@given(lines=raw_lines, which=st.integers(0, 1))
def test_word_piece_cache_ids_equal_the_tokenizer_call(tokenizers, lines, which):
    """Training ids (`tokenize_batch`, cached per word) = translation-time ids (xlpe-translate whitespace-normalises
    a line, then calls the tokenizer), for punctuation, unicode that NFKC expands (to a leading space, to several
    words), the Metaspace mark itself, added tokens' text and repeated whitespace. Found: a batch's "\u2581" alone
    took one piece from the cache, two in a sentence."""
    from xlpe.features.tokenization import tokenize_batch

    tokenizer = tokenizers[which]
    texts = [" ".join(line.split()) for line in lines]
    assert tokenize_batch(tokenizer, texts).to_lists()[0] == [tokenizer(text)["input_ids"] for text in texts]


def test_the_metaspace_mark_first_in_a_chunk_is_not_cached_as_one_piece(tokenizers):
    from xlpe.features.tokenization import _WordPieceCache, tokenize_batch

    tokenizer = tokenizers[0]
    _WordPieceCache._caches.pop(id(tokenizer), None)
    tokenize_batch(tokenizer, ["\u2581 b"])  # "\u2581" first in its chunk: the chunk is well formed
    assert tokenize_batch(tokenizer, ["a \u2581"]).to_lists()[0] == [tokenizer("a \u2581")["input_ids"]]


def test_a_damaged_local_dataset_is_named_in_one_line(tmp_path):
    from xlpe.features.corpus import load_parallel_dataset

    datasets.Dataset.from_dict({"de": ["ein hund"], "en": ["a dog"]}).save_to_disk(str(tmp_path / "data"))
    (tmp_path / "data" / "state.json").write_text("{", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(tmp_path / 'data'))}: a damaged datasets directory"
    ) as error:
        load_parallel_dataset(str(tmp_path / "data"), "de", "en")
    assert "\n" not in str(error.value)


def test_a_job_given_other_files_or_a_changed_work_tokenizer_or_priors_is_refused(tmp_path):
    """A shard job started with other --source than the plan's, a WORK/tokenizer replaced after planning, and
    priors edited after planning: each a one-line error naming the file, never a silently mixed preparation."""
    files = write_corpus(tmp_path)
    work = tmp_path / "work"
    plan(work, files)
    other = {"train": {**files["train"], "source": str(tmp_path / "elsewhere.source")}}
    with pytest.raises(
        ValueError, match=r"--source .*elsewhere\.source: --work-dir .* was planned from .*train\.source"
    ):
        sharded.load_plan(work, files=other)
    assert sharded.load_plan(work, files=files)["splits"]["train"]["source"] == files["train"]["source"]
    from xlpe.features.tokenization import train_joint_tokenizer

    train_joint_tokenizer(["x y z"] * 5, vocab_size=10, model="bpe").save_pretrained(str(work / "tokenizer"))
    with pytest.raises(ValueError, match=r"tokenizer: not the tokenizer the plan was made with"):
        sharded.run_shards(work, sharded.load_plan(work), [0], progress=False)
    unaligned = {"train": {**files["train"], "alignments": None}}
    priors_work = tmp_path / "priors"
    planned = sharded.plan_preparation(
        priors_work,
        unaligned,
        shard_size=150,
        alignment_sample=100,
        tokenizer_options=TOKENIZER,
        eflomal_options={"n_iterations": (1, 1, 1)},
    )
    with open(priors_work / "alignment_priors.txt", "a", encoding="utf-8") as handle:
        handle.write("LEX\tx\ty\t1\n")
    with pytest.raises(ValueError, match=r"alignment_priors\.txt: missing or changed since the plan was made"):
        sharded.run_shards(priors_work, planned, [0], progress=False)


def test_cli_damaged_shard_then_the_advised_command_then_merge(tmp_path, capsys):
    """End to end through `xlpe-prepare` (in this process): plan, shards, a shard file damaged, merge refuses in one
    line (exit 2) advising `--stage shards --shard-index K`; that command (same flags) makes it anew; merge writes
    the dataset of the undamaged shards."""
    from xlpe.cli.prepare import main

    files = write_corpus(tmp_path)
    flags = [
        "--source",
        files["train"]["source"],
        "--target",
        files["train"]["target"],
        "--alignments",
        files["train"]["alignments"],
        "--output",
        str(tmp_path / "out"),
        "--tokenizer-model",
        "bpe",
        "--tokenizer-vocab-size",
        "300",
        "--shard-size",
        "100",
        "--keep-work-dir",
    ]
    assert main([*flags, "--stage", "plan"]) == 0 and main([*flags, "--stage", "shards"]) == 0
    shard = tmp_path / "out.work" / "shards" / "00002" / "data"
    before = datasets.load_from_disk(str(shard)).to_dict()
    arrow = next(shard.glob("*.arrow"))
    arrow.write_bytes(b"\0" * 64 + arrow.read_bytes()[64:])
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main([*flags, "--stage", "merge"])
    error = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and len(error.splitlines()) == 1 and "shard 2 (damaged:" in error, error
    advised = re.search(r"--stage shards --shard-index ([\d ]+) \(", error).group(1).split()
    assert main([*flags, "--stage", "shards", "--shard-index", *advised]) == 0
    assert datasets.load_from_disk(str(shard)).to_dict() == before
    assert main([*flags, "--stage", "merge"]) == 0
    assert len(datasets.load_from_disk(str(tmp_path / "out"))["train"]) == sum(
        len(datasets.load_from_disk(str(path / "data")))
        for path in sorted((tmp_path / "out.work" / "shards").iterdir())
    )


def test_cli_work_dir_in_use_refuses_a_replan_or_merge_but_not_another_shard_job(tmp_path, capsys):
    """Shard jobs share the work directory (a shared lock beside it); planning anew and merging hold it alone: a
    re-plan with --overwrite-work-dir or a merge while a shard job runs is one line (exit 2) and removes nothing;
    another shard job runs beside it; a merge or plan in progress refuses shard jobs."""
    from xlpe.cli.prepare import main
    from xlpe.features.artefacts import directory_lock

    files = write_corpus(tmp_path)
    flags = [
        "--source",
        files["train"]["source"],
        "--target",
        files["train"]["target"],
        "--alignments",
        files["train"]["alignments"],
        "--output",
        str(tmp_path / "out"),
        "--tokenizer-model",
        "bpe",
        "--tokenizer-vocab-size",
        "300",
        "--shard-size",
        "100",
        "--keep-work-dir",
    ]
    assert main([*flags, "--stage", "plan"]) == 0
    work, lock = tmp_path / "out.work", tmp_path / ".out.work.xlpe.lock"
    plan_before = (work / "plan.json").read_bytes()
    with directory_lock(work, "xlpe-prepare --stage shards", shared=True, lock_file=lock):  # a shard job runs
        for stage in (["--stage", "plan", "--overwrite-work-dir"], ["--stage", "merge"]):
            capsys.readouterr()
            with pytest.raises(SystemExit) as refused:
                main([*flags, *stage])
            error = capsys.readouterr().err.strip()
            assert refused.value.code == 2 and len(error.splitlines()) == 1 and "is in use" in error, error
        assert (work / "plan.json").read_bytes() == plan_before  # nothing removed
        assert main([*flags, "--stage", "shards", "--shard-index", "0"]) == 0  # another shard job: fine
    with directory_lock(work, "xlpe-prepare --stage merge", lock_file=lock):  # a merge runs
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            main([*flags, "--stage", "shards", "--shard-index", "1"])
        assert refused.value.code == 2 and "xlpe-prepare --stage merge (pid" in capsys.readouterr().err
    assert main([*flags, "--stage", "shards"]) == 0 and main([*flags, "--stage", "merge"]) == 0
