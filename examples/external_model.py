"""Judge another simulator's numbers against packets, end to end, with a model of a few
lines: a FIFO prefill queue per instance, then the KV transfer as its size over the
tier's bandwidth (what SimAI's disaggregated-serving path does), then one decode step.

    .venv/bin/testbed export-workload RUN                 # RUN/workload.json
    .venv/bin/python examples/external_model.py RUN/workload.json predictions.csv
    .venv/bin/testbed judge --predictions predictions.csv RUN

RUN: any finished run folder (`testbed emulate`, `testbed simulate --engine ns3`) or a
validation folder (its packets' run). The columns and the checks: docs/predictions.md.
"""

import csv
import json
import sys


def predict(workload: dict) -> list[dict]:
    t, gbps = workload["timing"], workload["fabric"]["tier_bandwidth_gbps"]
    rows = []
    for cell in workload["cells"]:
        free: dict[str, float] = {}  # prefill instance -> when it is next idle
        for r in sorted(cell["requests"], key=lambda r: r["arrival_s"]):
            if r["prefill"] is None or r["decode"] is None:
                continue  # never placed: nothing to predict
            start = max(r["arrival_s"], free.get(r["prefill"], 0.0))
            tokens = r["input_tokens"] - r["hit_tokens"]
            free[r["prefill"]] = start + t["prefill_base_s"] + t["prefill_per_token_s"] * tokens
            transfer = r["transfer_bytes"] * 8 / (gbps[str(r["tier"])] * 1e9)
            first = free[r["prefill"]] + transfer + t["iter_base_s"] + t["iter_per_seq_s"]
            rows.append({"cell": cell["cell"], "request": r["id"],
                         "ttft_s": first - r["arrival_s"], "transfer_s": transfer or ""})
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        rows = predict(json.load(f))
    with open(sys.argv[2], "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=["cell", "request", "ttft_s", "transfer_s"])
        out.writeheader()
        out.writerows(rows)
    print(f"{len(rows)} predictions written to {sys.argv[2]}")
