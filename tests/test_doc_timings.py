"""Every timing or result the README and docs quote between `<!-- timing:NAME -->` markers is the
range `bench/doc_timings.py` recorded (bench/doc_timings.json, with the machine): `bench/check_records.py` (CI's own
step) fails when the docs drift from the record (rerun `python bench/doc_timings.py measure` and `update-docs`);
here the record's shape, the check itself and the old single-run claims being gone."""

from __future__ import annotations

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import doc_timings  # noqa: E402

RECORD = doc_timings.load_record()


def test_the_record_says_where_and_how_it_was_measured():
    assert (
        "cores" in RECORD["machine"]
        and RECORD["measured"]
        and "busy" in RECORD["how"]
        and "load average" in RECORD["how"]
    )
    for name, entry in RECORD["entries"].items():
        assert entry["values"] and entry["unit"] in ("s", "BLEU", "parameters"), name
    assert {f"help:{command}" for command in doc_timings.COMMANDS} | {"help:any", "user_error"} <= set(
        RECORD["entries"]
    )


def test_every_marker_names_a_recorded_entry():
    for path, name, _ in doc_timings.doc_markers():
        assert name in RECORD["entries"], f"{path.name}: marker {name!r} names nothing bench/doc_timings.py records"


def test_a_quote_that_drifted_from_the_record_is_reported(monkeypatch):
    """Whether the docs quote the record is checked by `bench/check_records.py` (CI's own step); here: the check
    reports a quote that differs, with the command that fixes it."""
    import check_records

    path, name, text = doc_timings.doc_markers()[0]
    monkeypatch.setattr(doc_timings, "doc_markers", lambda: [(path, name, text + " (edited)")])
    problems = check_records.documentation_timings()
    assert len(problems) == 1 and name in problems[0] and "doc_timings.py update-docs" in problems[0]


def test_the_main_claims_are_marked_and_the_old_single_figures_are_gone():
    names = {name for _, name, _ in doc_timings.doc_markers()}
    assert {"help:any", "help:xlpe-train", "user_error"} <= names
    readme, training = ((REPO_ROOT / f).read_text(encoding="utf-8") for f in ("README.md", "docs/training.md"))
    for stale in ("in about a minute on 2 CPU cores", "BLEU ≈ 98", "20-second toy demo"):
        assert stale not in readme
    for stale in ("0.96M parameters", "63 s wall clock", "test BLEU 99.1"):
        assert stale not in training


def test_render_gives_ranges_in_the_units_the_docs_use():
    render = doc_timings.render_entry
    assert render({"values": [0.31, 0.62], "unit": "s"}) == "0.3-0.6 s"
    assert render({"values": [63, 80.4], "unit": "s"}) == "63-80 s"
    assert render({"values": [70, 200], "unit": "s"}) == "1.2-3.3 min"
    assert render({"values": [97.31, 99.12], "unit": "BLEU"}) == "97.3-99.1"
    assert render({"values": [733404, 733404], "unit": "parameters"}) == "733,404"


def test_update_docs_rewrites_only_the_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("A run takes <!-- timing:user_error -->old<!-- /timing --> here; 63 s elsewhere stays.\n")
    assert doc_timings.update_docs(RECORD, [page]) == [page]
    assert page.read_text() == (
        f"A run takes <!-- timing:user_error -->{doc_timings.render(RECORD, 'user_error')}"
        "<!-- /timing --> here; 63 s elsewhere stays.\n"
    )
