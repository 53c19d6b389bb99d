"""comparison.json is written and read through its model: a document this version did not
write is refused with the field it lacks and what to do."""

import json

import pytest

from testbed.scenario import Scenario
from testbed.validate.comparison.document import (
    SCHEMA_VERSION,
    DocumentError,
    load,
    read_comparison,
    write_comparison,
)
from testbed.validate.pipelines.judge_folder import judge_again
from tests.conftest import TRACE, flow_validation


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    base = Scenario(name="doc", workload={"trace": str(TRACE), "measure_s": 4.0},
                    schedulers=["rr", "netkv-full"], network={"ecmp": "per-pair"})
    folder = flow_validation(tmp_path_factory.mktemp("v") / "doc-validate-x", base)
    judge_again(folder)
    return folder


def test_a_validation_writes_a_document_its_model_reads_back(judged):
    raw = json.loads((judged / "comparison.json").read_text())
    assert next(iter(raw)) == "schema_version" and raw["schema_version"] == SCHEMA_VERSION
    doc = read_comparison(judged / "comparison.json")
    assert doc.targets.runs == 2 and doc.judged.seeds == 1
    claim = doc.claims["000-base"].claims[0]
    assert claim.verdict in ("agree", "disagree", "inconclusive") and claim.packets.low is not None
    assert all(t.field for t in doc.beside().values())
    assert load(judged / "comparison.json") == raw  # the dict readers get is the file


def test_a_document_missing_a_field_names_it_and_nothing_is_written(judged, tmp_path):
    raw = json.loads((judged / "comparison.json").read_text())
    del raw["targets"]["runs"]
    with pytest.raises(DocumentError, match=r"targets\.runs: Field required"):
        write_comparison(tmp_path / "comparison.json", raw)
    assert not (tmp_path / "comparison.json").exists()
    raw = json.loads((judged / "comparison.json").read_text())
    raw["claims"]["000-base"]["claims"][0]["verdict"] = "maybe"
    with pytest.raises(DocumentError, match=r"claims\.000-base\.claims\.0\.verdict"):
        write_comparison(tmp_path / "comparison.json", raw)


def test_an_older_or_foreign_document_is_refused_with_what_to_do(judged, tmp_path):
    raw = json.loads((judged / "comparison.json").read_text())
    del raw["schema_version"]
    (tmp_path / "comparison.json").write_text(json.dumps(raw))
    with pytest.raises(DocumentError, match="testbed judge"):
        read_comparison(tmp_path / "comparison.json")
    (tmp_path / "comparison.json").write_text("[1, 2]")
    with pytest.raises(DocumentError, match="not a validation"):
        load(tmp_path / "comparison.json")
    raw = json.loads((judged / "comparison.json").read_text())
    raw["contention"] = {"title": "link contention"}
    with pytest.raises(DocumentError, match=r"contention\.field: Field required"):
        write_comparison(tmp_path / "c2.json", raw)
    raw = json.loads((judged / "comparison.json").read_text())
    raw["surprise"] = 1
    with pytest.raises(DocumentError, match="surprise: Extra inputs are not permitted"):
        write_comparison(tmp_path / "c2.json", raw)


def test_every_term_judged_beside_has_its_section():
    from testbed.validate.comparison.beside import TERMS
    from testbed.validate.comparison.document import BESIDE, Comparison

    assert set(BESIDE) == set(TERMS) and set(BESIDE) <= set(Comparison.model_fields)
