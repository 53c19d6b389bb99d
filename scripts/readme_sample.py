"""Put a real validation's answer in the README as its sample output.

    .venv/bin/python scripts/readme_sample.py results/validate-validate-<stamp>

Reads the finished validation FOLDER (e.g. the one `./run.sh demo` just wrote), keeps
what its answer is made of in docs/samples/demo-answer.json and rewrites the README's
block between the demo-answer markers with the lines `testbed validate` printed.
tests/test_readme.py renders that file again and checks the README still matches.
"""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path

from testbed.results import ValidationResult
from testbed.validate.report.answer import answer_lines, primary_claims

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs" / "samples" / "demo-answer.json"
README = ROOT / "README.md"
START, END = "<!-- demo-answer:start -->", "<!-- demo-answer:end -->"


def sample(result: ValidationResult) -> dict:
    """What the answer reads, and no more (comparison.json itself is about a megabyte)."""
    doc = result.comparison
    claims = _primary(doc)
    wall = result.folder / "wall.json"
    three = _three_way(doc["three_way"]) if doc.get("three_way") else {}
    return {"date": date.today().isoformat(), "folder": result.folder.name,
            "report": f"results/{result.folder.name}/report.md",
            "doc": {"claims": claims, "judged": doc.get("judged"),
                    "sequential": {"level": doc["sequential"]["level"]}
                    if doc.get("sequential") else None,
                    "targets": {k: doc["targets"][k] for k in
                                ("runs", "unfaithful_runs", "packets")}, **three},
            "wall": json.loads(wall.read_text()) if wall.exists() else None}


def _primary(doc: dict) -> dict:
    out: dict = {}
    for point, c in primary_claims(doc):
        out.setdefault(point, {"n": doc["claims"][point]["n"], "claims": []})
        out[point]["claims"].append(c)
    return out


def _three_way(tw: dict) -> dict:
    """What the answer of a validation on both packet engines reads of its section."""
    flow, stand = tw["flow_vs_ns3"], tw["stand_in"]
    seq = flow.get("sequential")
    return {"three_way": {
        "flow_vs_ns3": {"claims": _primary(flow), "judged": flow["judged"],
                        "runs": flow["runs"], "wall": flow["wall"],
                        "sequential": {k: seq[k] for k in ("level", "segments") if k in seq}
                        if seq else None},
        "stand_in": {"seeds": stand["seeds"], "claims": _primary(stand),
                     "transfers_forced": {k: stand["transfers_forced"].get(k) for k in
                                          ("n", "median_abs_error", "p90_abs_error")}},
        "replay": _replay(tw.get("replay")),
        "emulation_seeds": {"settle": (tw.get("emulation_seeds") or {}).get("settle")}}}


def _replay(replay: dict | None) -> dict | None:
    """ns-3's replay of the emulation's transfers: the figures the answer's last line reads."""
    above = ((replay or {}).get("overall") or {}).get("above_floor")
    if not above:
        return None
    return {"overall": {"above_floor": {k: above[k] for k in
                                        ("n", "median_abs_error", "p90_abs_error")}}}


def printed(s: dict) -> list[str]:
    """The lines the demo printed after its progress bar."""
    return answer_lines(s["doc"], s["wall"]) + [f"Report: {s['report']}"]


def readme_block(text: str) -> list[str]:
    """The README's sample lines, between the markers (inside its code fence)."""
    inner = text.split(START, 1)[1].split(END, 1)[0].strip().splitlines()
    return [line for line in inner if not line.startswith("```")]


def main(folder: str) -> None:
    s = sample(ValidationResult(Path(folder)))
    SAMPLE.write_text(json.dumps(s, indent=1) + "\n")
    text = README.read_text()
    head, rest = text.split(START, 1)
    block = "\n".join([START, "```", *printed(s), "```", END])
    README.write_text(head + block + rest.split(END, 1)[1])
    print("\n".join(printed(s)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
