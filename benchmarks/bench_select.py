"""Which flow-model terms earn their place: held-out selection over finished validations
(testbed/validate/comparison/selection.py). Reads each folder's comparison.json; runs nothing, needs
no root. bench_validate.py prints the same table after its rows.

Run: .venv/bin/python benchmarks/bench_select.py chatbot=FOLDER rag=FOLDER ...
     (judge old folders first with `testbed judge FOLDER` so every model was run)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.validate.comparison.document import DocumentError, load
from testbed.validate.comparison.selection import row_figures, selection_lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", metavar="NAME=FOLDER",
                    help="a validation folder per row, named")
    args = ap.parse_args()
    rows = {}
    for item in args.rows:
        name, _, folder = item.partition("=")
        path = Path(folder or name) / "comparison.json"
        if not path.is_file():
            ap.error(f"{item}: no comparison.json in {path.parent}")
        try:
            rows[name] = row_figures(load(path))
        except DocumentError as exc:
            ap.error(str(exc))
    print("\n".join(selection_lines(rows)))


if __name__ == "__main__":
    main()
