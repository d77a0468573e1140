"""The reuse mechanism (xlpe/features/artefacts.py): unambiguous digests, records verified on reuse, locks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.artefacts import (
    ArtefactMismatch,
    ArtefactRecord,
    DirectoryInUse,
    digest,
    directory_lock,
    file_digest,
    lines_digest,
    read_record,
    record_path,
    verify_artefact,
    write_record,
)

texts = st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=6), max_size=5)


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_digests_of_different_line_lists_differ(a, b):
    """Joining with a separator that can occur in the text collides ("a\\tb" + "" vs "a" + "b\\t"); these never do."""
    assert (lines_digest(a) == lines_digest(b)) == (a == b)
    assert (digest(a) == digest(b)) == (a == b)


def test_separator_collisions_of_a_joined_key_do_not_collide_here():
    assert lines_digest(["a\tb", ""]) != lines_digest(["a", "b\t"])
    assert lines_digest(["a\nb"]) != lines_digest(["a", "b"])
    assert digest({"x": 1, "y": [1, 2]}) == digest({"y": [1, 2], "x": 1})  # key order does not matter


def test_file_digest_reads_bytes(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc\r\n")
    assert file_digest(path) == __import__("hashlib").sha256(b"abc\r\n").hexdigest()


def record(**options):
    return ArtefactRecord("reorderer", inputs={"source": digest(["a b"])}, options={"epochs": 3, "lr": 1e-3, **options})


def test_verify_accepts_the_same_record_and_returns_changeable_differences(tmp_path):
    write_record(tmp_path, record())
    assert read_record(tmp_path) == record()
    assert verify_artefact(tmp_path, record(), override="--overwrite") == []
    assert verify_artefact(tmp_path, record(lr=5e-4), override="--overwrite", changeable=["lr"]) == [("lr", 1e-3, 5e-4)]


@pytest.mark.parametrize(
    "change, fact, words",
    [
        (lambda r: setattr(r, "inputs", {"source": digest(["x y"])}), "input source", "other data"),
        (lambda r: r.options.update(epochs=5), "option epochs", "other options"),
        (lambda r: setattr(r, "kind", "jackknife"), "kind", "holds a reorderer, not a jackknife"),
        (lambda r: setattr(r, "format", 99), "format", "another version"),
    ],
)
def test_verify_refuses_any_other_difference_in_one_line(tmp_path, change, fact, words):
    write_record(tmp_path, record())
    expected = record()
    change(expected)
    with pytest.raises(ArtefactMismatch, match=words) as caught:
        verify_artefact(tmp_path, expected, override="--overwrite", changeable=["lr"])
    message = str(caught.value)
    assert "\n" not in message and "--overwrite" in message and str(tmp_path) in message
    assert caught.value.fact == fact


def test_a_refusal_names_every_difference_old_and_new(tmp_path):
    """A rerun with another --d_model (and other data) names each option that differs, not only the first."""
    write_record(tmp_path, record(d_model=16))
    expected = record(d_model=32, epochs=4)
    with pytest.raises(ArtefactMismatch) as caught:
        verify_artefact(tmp_path, expected, override="--overwrite")
    assert "made from other options (option d_model: 16, now 32; option epochs: 3, now 4)" in str(caught.value)
    expected.inputs = {"source": digest(["x y"])}
    with pytest.raises(ArtefactMismatch, match=r"made from other data and options \(input source: .*; option d_model"):
        verify_artefact(tmp_path, expected, override="--overwrite")


def test_a_directory_without_or_with_a_damaged_record_is_refused(tmp_path):
    with pytest.raises(ArtefactMismatch, match="no record"):
        verify_artefact(tmp_path, record(), override="--overwrite")
    record_path(tmp_path).write_text('{"kind": "reorderer",\n "inputs": [}', encoding="utf-8")
    with pytest.raises(ArtefactMismatch, match=r"xlpe_artefact.json:2: not a valid artefact record"):
        read_record(tmp_path)
    record_path(tmp_path).write_text('{"kind": 3, "inputs": {}, "options": {}, "format": 1}', encoding="utf-8")
    with pytest.raises(ArtefactMismatch, match="needs kind"):
        read_record(tmp_path)


def test_a_locked_directory_refuses_a_second_process_and_frees_on_exit(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from xlpe.features.artefacts import directory_lock, DirectoryInUse
        try:
            with directory_lock({str(tmp_path)!r}, "second"):
                print("locked")
        except DirectoryInUse as error:
            print("refused:", error)
    """)
    with directory_lock(tmp_path, "xlpe-train --output_dir x"):
        held = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        with pytest.raises(DirectoryInUse):  # the same process, another handle: refused too
            with directory_lock(tmp_path, "again"):
                pass
    assert held.startswith("refused:") and "xlpe-train --output_dir x (pid" in held
    free = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert free.strip() == "locked"


def test_a_released_exclusive_lock_leaves_no_file_and_the_next_holder_gets_a_live_one(tmp_path):
    """An exclusive holder removes `.xlpe.lock` as it lets go (a refused or finished command leaves the folder as
    it found it); an opener of the removed file locks the one now at the path, never a dead inode."""
    from xlpe.features.artefacts import LOCK_NAME, DirectoryInUse, directory_lock

    with directory_lock(tmp_path, "first"):
        assert (tmp_path / LOCK_NAME).is_file()
        with pytest.raises(DirectoryInUse, match="in use by first"):
            with directory_lock(tmp_path, "second"):
                pass
    assert not (tmp_path / LOCK_NAME).exists()
    stale = open(tmp_path / LOCK_NAME, "a+")  # opened by a process that then waited while the file was replaced
    (tmp_path / LOCK_NAME).unlink()
    with directory_lock(tmp_path, "third") as held:
        assert os.stat(held).st_ino != os.fstat(stale.fileno()).st_ino
        with pytest.raises(DirectoryInUse, match="in use by third"):
            with directory_lock(tmp_path, "fourth"):
                pass
    stale.close()
    with directory_lock(tmp_path, "shared", shared=True):
        pass
    assert (tmp_path / LOCK_NAME).exists()  # shared holders leave it to the others
