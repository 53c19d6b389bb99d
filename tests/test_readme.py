"""The README's sample output is what the demo prints: a real run's answer, rendered again
from what that run measured (docs/samples/demo-answer.json, scripts/readme_sample.py)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import readme_sample  # noqa: E402

from testbed.validate.report.answer import WIDTH  # noqa: E402


def test_the_readme_shows_the_answer_the_demo_prints_for_its_recorded_run():
    s = json.loads(readme_sample.SAMPLE.read_text())
    want = readme_sample.printed(s)
    got = readme_sample.readme_block(readme_sample.README.read_text())
    assert got == want, ("the README's sample is not what the demo prints for "
                         f"{readme_sample.SAMPLE.name}: run scripts/readme_sample.py on a demo "
                         "run's folder")
    assert len(got) <= 8 and all(len(line) <= WIDTH for line in got[:-1]), got
    assert got[0].startswith("Claims on packets: ") and got[-1].startswith("Report: ")


def test_the_sample_keeps_only_what_the_answer_reads():
    s = json.loads(readme_sample.SAMPLE.read_text())
    assert set(s["doc"]) - {"three_way"} == {"claims", "judged", "sequential", "targets"}
    assert all(c["metric"] == "ttft_mean" for by in s["doc"]["claims"].values()
               for c in by["claims"])
