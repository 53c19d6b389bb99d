"""The scenario field reference is generated from the models and kept current."""

from pathlib import Path

from testbed.scenario.reference import reference, undescribed

PAGE = Path(__file__).resolve().parents[1] / "docs" / "scenario-reference.md"


def test_every_scenario_field_says_what_it_means():
    assert undescribed() == [], "give these fields a description= in testbed/scenario/"


def test_the_field_reference_is_what_the_models_generate():
    assert PAGE.read_text() == reference(), (
        "docs/scenario-reference.md is stale: python -m testbed.scenario.reference > "
        "docs/scenario-reference.md")


def test_the_reference_names_nested_fields_by_their_dotted_path():
    text = reference()
    for path in ("`network.tcp.shard_spread`", "`emulation.scale`", "`ns3.transport`",
                 "`workload.synthetic.zipf_s`", "`faults.kind`"):
        assert f"| {path} |" in text, path
