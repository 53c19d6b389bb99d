"""The flow models' table (pure words): one verdict row per network model and packet
engine, for the terminal after the answer and for the report (validate/pipelines/flow_models.py
judged them)."""

from __future__ import annotations

from testbed.validate.judging import targets as goal

HEADER = ("model", "packets", "replay median", "p90", "both", "claims", "rank",
          "targets met")


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def _ci(t: dict) -> str:
    low, high = t["replay_median_ci"]
    if low is None or high is None or low != low:
        return _pct(t["replay_median_abs_transfer_error"])
    return f"{_pct(t['replay_median_abs_transfer_error'])} [{100 * low:.1f}, {100 * high:.1f}]"


def _claims(t: dict) -> str:
    v = t.get("gain_verdicts") or {}
    return f"{v.get('agree', 0)}/{v.get('disagree', 0)}/{v.get('inconclusive', 0)}"


def _ranking(rankings: dict) -> str:
    seeds = sum(r["seeds"] for r in rankings.values())
    same = sum(r["same"] for r in rankings.values())
    return f"{same}/{seeds}" if seeds else "-"


def met(row: dict) -> list[str]:
    """Which per-transfer and ranking targets a model meets: replay median (med) and p90,
    both engines' median (both), the same ranking in every seed (rank)."""
    t, out = row["targets"], []
    checks = (("med", t["replay_median_abs_transfer_error"], goal.TRANSFER_MEDIAN),
              ("p90", t["replay_p90_abs_transfer_error"], goal.TRANSFER_P90),
              ("both", t["engines_median_abs_transfer_error"], goal.ENGINES_MEDIAN))
    for name, value, target in checks:
        if value is not None and value == value and value <= target:
            out.append(name)
    rankings = row["seed_rankings"]
    if rankings and all(r["seeds"] and r["same"] == r["seeds"] for r in rankings.values()):
        out.append("rank")
    return out


def rows(section: dict) -> list[tuple[str, ...]]:
    """Every model's row, the engines' sections in turn (the emulation's, then ns-3's)."""
    out = []
    for part in [section, *([section["ns3"]] if section.get("ns3") else [])]:
        engine = "ns-3" if part["packets"] == "ns3" else "emulation"
        for row in part["models"]:
            t = row["targets"]
            got = met(row)
            faults = f", {row['faults']} plugin faults" if row.get("faults") else ""
            out.append((row["name"], engine, _ci(t), _pct(t["replay_p90_abs_transfer_error"]),
                        _pct(t["engines_median_abs_transfer_error"]), _claims(t),
                        _ranking(row["seed_rankings"]),
                        (" ".join(got) if got else "none") + faults))
    return out


def intro() -> list[str]:
    return [f"Flow models against packets: whole transfers' |error| (targets: replay median "
            f"<= {100 * goal.TRANSFER_MEDIAN:.0f}%,",
            f"p90 <= {100 * goal.TRANSFER_P90:.0f}%, both engines deciding <= "
            f"{100 * goal.ENGINES_MEDIAN:.0f}%); mean-TTFT gain claims agree/disagree/"
            "inconclusive;",
            "rank: seeds both engines rank alike."]


def terminal_lines(section: dict | None) -> list[str]:
    if not section:
        return []
    widths = (23, 10, 19, 7, 7, 7, 5)
    out = ["", *intro()]
    for r in [HEADER, *rows(section)]:
        out.append("".join(f"{c:<{w - 1}} " for c, w in zip(r, widths, strict=False)) + r[-1])
    return out


def markdown_lines(section: dict | None) -> list[str]:
    if not section:
        return []
    return ["## Flow models", "", " ".join(intro()) + " Each model is given the calibration's link "
            "rates and TCP fit and judged as the verdict's model is (replay: the packets' own "
            "transfers; both: each engine deciding); max-min is the verdict's model "
            "(docs/schedulers.md#network-models).", "",
            "| " + " | ".join(HEADER) + " |", "|---" * len(HEADER) + "|",
            *("| " + " | ".join(r) + " |" for r in rows(section)), ""]
