"""Seeded eflomal (xlpe/features/eflomal_seed.py): the same corpus, options and seed give the same links and
oracle; another seed gives another sample; nothing leaks into this process's environment; bad seeds and a
missing compiler are clear errors; `xlpe-prepare --alignment-seed` makes two preparations identical."""

from __future__ import annotations

import json
import os
import sys
import warnings

import pytest
from conftest import SHARED_DIR, write_multi30k_slice

from xlpe.features.alignment import align_with_eflomal, read_text_lines

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seeded eflomal needs LD_PRELOAD (Linux)")

MULTI30K = SHARED_DIR / "data" / "multi30k" / "raw"
FAST = dict(n_iterations=(4, 4, 8))  # several samplers (eflomal's default 3): their order is what seeding fixes


@pytest.fixture(scope="module")
def pairs():
    if not MULTI30K.is_dir():
        pytest.skip(f"{MULTI30K} not found")
    return read_text_lines(MULTI30K / "train.de.gz")[:300], read_text_lines(MULTI30K / "train.en.gz")[:300]


def test_same_seed_same_links_other_seed_other_sample(pairs):
    before = dict(os.environ)
    first, again = (align_with_eflomal(*pairs, seed=11, **FAST) for _ in range(2))
    assert first == again
    assert align_with_eflomal(*pairs, seed=12, **FAST) != first
    assert align_with_eflomal(*pairs, **FAST) != align_with_eflomal(*pairs, **FAST)  # what seeding fixes
    voted = [align_with_eflomal(pairs[0][:80], pairs[1][:80], runs=3, seed=5, **FAST) for _ in range(2)]
    assert voted[0] == voted[1]
    assert dict(os.environ) == before  # the seed environment reached only the eflomal processes


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, "7", True])
def test_bad_seeds_name_the_option(pairs, seed):
    with pytest.raises(ValueError, match="eflomal_options seed must be an integer"):
        align_with_eflomal(pairs[0][:5], pairs[1][:5], seed=seed, **FAST)


def test_missing_compiler_is_a_clear_error(pairs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing built there yet
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(ValueError, match="cannot run the C compiler"):
        align_with_eflomal(pairs[0][:5], pairs[1][:5], seed=1, **FAST)


def test_prepare_cli_alignment_seed_gives_identical_preparations(tmp_path, capsys):
    import datasets

    from xlpe.cli.prepare import main

    write_multi30k_slice(tmp_path, {"train": 80, "dev": 6, "test": 6})
    argv = [
        "--source",
        str(tmp_path / "train.de"),
        "--target",
        str(tmp_path / "train.en"),
        "--tokenizer-vocab-size",
        "300",
        "--features",
        "reorder_positions",
        "--eflomal-options",
        json.dumps({"n_iterations": [4, 4, 8]}),
        "--alignment-seed",
        "3",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("one", "two"):
            assert main([*argv, "--output", str(tmp_path / name)]) == 0
    one, two = (datasets.load_from_disk(str(tmp_path / name)) for name in ("one", "two"))
    assert one["train"]["reorder_positions"] == two["train"]["reorder_positions"]
    report = json.loads((tmp_path / "one" / "report.json").read_text())
    assert '"seed": 3' in json.dumps(report)  # the seed is part of the recorded preparation options
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                *argv[:-2],
                "--eflomal-options",
                json.dumps({"seed": 4}),
                "--alignment-seed",
                "3",
                "--output",
                str(tmp_path / "three"),
            ]
        )
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == "xlpe-prepare: error: --alignment-seed 3 but --eflomal-options has seed 4: give one"
    )


def synthetic_pairs(size: int = 120):
    from xlpe.features.synthetic import generate_corpus

    sources, targets, _ = generate_corpus(size, seed=4)
    return sources, targets


def test_a_cache_path_with_a_space_or_colon_still_seeds(tmp_path, monkeypatch):
    """The user's sequence: XDG_CACHE_HOME under a folder with a space (and a colon); two seeded runs must give the
    same links (LD_PRELOAD splits at spaces and colons: the library is built where it can be named)."""
    from xlpe.features import eflomal_seed

    odd = tmp_path / "my cache:dir"
    odd.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(odd))
    library = eflomal_seed.seed_library()
    assert " " not in library and ":" not in library and os.path.isfile(library)
    sources, targets = synthetic_pairs()
    first, again = (align_with_eflomal(sources, targets, seed=3, **FAST) for _ in range(2))
    assert first == again


def test_a_library_that_is_not_preloaded_is_an_error_not_an_unseeded_run(tmp_path, monkeypatch):
    from xlpe.features import eflomal_seed

    missing = tmp_path / "no-such-library.so"
    monkeypatch.setattr(eflomal_seed, "seed_library", lambda: str(missing))
    sources, targets = synthetic_pairs(40)
    with pytest.raises(ValueError, match=r"did not load the seed library .*no-such-library\.so"):
        align_with_eflomal(sources, targets, seed=3, **FAST)
