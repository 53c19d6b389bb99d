"""Held-out selection of flow-model terms (validate/comparison/selection.py)."""

from testbed.validate.comparison.selection import held_out, row_figures, selection_lines


def _row(cal, tcp, cont=None):
    out = {"calibrated": dict(zip(("replay_p90", "ttft_error"), cal, strict=True)),
           "tcp": dict(zip(("replay_p90", "ttft_error"), tcp, strict=True))}
    if cont:
        out["tcp_contended"] = dict(zip(("replay_p90", "ttft_error"), cont, strict=True))
    return out


def test_a_term_that_helps_on_most_rows_is_on_and_one_that_hurts_is_off():
    rows = {"a": _row((0.3, 0.10), (0.2, 0.05), (0.4, 0.2)),
            "b": _row((0.3, 0.10), (0.25, 0.08), (0.5, 0.2)),
            "c": _row((0.3, 0.10), (0.35, 0.12), (0.2, 0.05)),  # the one row it hurts
            "d": _row((0.3, 0.10), (0.2, 0.09), (0.5, 0.2))}
    got = held_out(rows)
    tcp = got["TCP terms"]
    assert tcp["default_on"] and all(f["chosen"] for f in tcp["folds"])
    left_c = next(f for f in tcp["folds"] if f["held_out"] == "c")
    assert left_c["improved"] == {"replay_p90": False, "ttft_error": False}
    cont = got["link contention"]
    assert not cont["default_on"] and not any(f["chosen"] for f in cont["folds"])
    assert "TCP terms: ON by default over 4 rows" in "\n".join(selection_lines(rows))


def test_a_term_good_on_one_row_only_is_not_chosen_when_that_row_is_left_out():
    rows = {"a": _row((0.3, 0.1), (0.1, 0.01)),  # a term tuned on one workload
            "b": _row((0.3, 0.1), (0.31, 0.11)),
            "c": _row((0.3, 0.1), (0.32, 0.12))}
    tcp = held_out(rows)["TCP terms"]
    assert not tcp["default_on"] and not any(f["chosen"] for f in tcp["folds"])
    assert held_out({"a": rows["a"], "b": _row((0.3, 0.1), (0.2, 0.05))})[
        "TCP terms"]["default_on"] is False  # two rows are too few to hold one out


def test_figures_of_a_validation_document():
    iv = lambda p: {"point": p, "low": p, "high": p, "n": 30}  # noqa: E731
    doc = {"whole_transfers": {"replay_calibrated": {"p90_abs_error": 0.3},
                               "replay_tcp": {"p90_abs_error": 0.2}},
           "ttft_verdicts": {"calibrated": {"p": {"rr": iv(-0.1), "cla": iv(0.3)}},
                             "tcp": {"p": {"rr": iv(0.05), "cla": iv(float("nan"))}}},
           "contention": None}
    got = row_figures(doc)
    assert got["calibrated"] == {"replay_p90": 0.3, "ttft_error": 0.2}
    assert got["tcp"] == {"replay_p90": 0.2, "ttft_error": 0.05}  # nan left out
    assert "tcp_contended" not in got


def test_the_probe_terms_are_judged_beside_the_verdicts_model_with_the_term_added():
    """The verdict's model leaves both terms fitted on competing probes out (the held-out
    selection did not keep them); each is judged beside it with the term alone added."""
    from testbed.scenario import load_scenario
    from testbed.validate.comparison.beside import TERMS as BESIDE
    from testbed.validate.comparison.selection import TERMS
    from testbed.validate.engines.flow_match import flow_scenario, replay_scenario
    from tests.conftest import ROOT

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml")
    fit = {"join_stall_s": 0.07, "contention_idle": 0.4}
    verdict = flow_scenario(sc, {1: 1.0}, fit).tcp_params()
    assert (verdict.join_stall_s, verdict.contention_idle) == (0.0, 0.0)
    assert replay_scenario(sc, {1: 1.0}, fit).tcp_params().join_stall_s == 0.0
    stall, cont = BESIDE["join_stall"], BESIDE["contention"]
    joined = flow_scenario(sc, {1: 1.0}, fit, beside=(stall.field,)).tcp_params()
    contended = flow_scenario(sc, {1: 1.0}, fit, beside=(cont.field,)).tcp_params()
    assert (joined.join_stall_s, joined.contention_idle) == (0.07, 0.0)
    assert (contended.contention_idle, contended.join_stall_s) == (0.4, 0.0)
    assert TERMS["join stall"] == ("tcp", "tcp_joined")
    assert TERMS["link contention"] == ("tcp", "tcp_contended")


def test_the_shard_spread_is_in_the_verdicts_model_and_judged_by_a_run_without_it():
    """A term the verdict has is judged the other way round: the run beside leaves it out,
    and the selection compares the verdict's model (with it) against that run."""
    from testbed.scenario import load_scenario
    from testbed.validate.comparison.beside import TERMS as BESIDE
    from testbed.validate.comparison.beside import other_way
    from testbed.validate.comparison.selection import TERMS
    from testbed.validate.engines.flow_match import flow_scenario
    from tests.conftest import ROOT

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml")
    fit = {"shard_spread": 0.38, "join_stall_s": 0.07}
    spread = BESIDE["spread"]
    assert flow_scenario(sc, {1: 1.0}, fit).tcp_params().shard_spread == 0.38
    without = other_way(sc, {1: 1.0}, fit, spread).tcp_params()
    assert (without.shard_spread, without.join_stall_s) == (0.0, 0.0)
    assert other_way(sc, {1: 1.0}, fit, BESIDE["join_stall"]).tcp_params().join_stall_s == 0.07
    assert TERMS["shard spread"] == ("tcp_unspread", "tcp")

    def row(spread_on, spread_off):  # (replay p90, ttft error) with the spread and without
        return {"calibrated": {"replay_p90": 0.5, "ttft_error": 0.5},
                "tcp": dict(zip(("replay_p90", "ttft_error"), spread_on, strict=True)),
                "tcp_unspread": dict(zip(("replay_p90", "ttft_error"), spread_off, strict=True))}

    helps = {n: row((0.2, 0.05), (0.3, 0.10)) for n in "abc"}
    assert held_out(helps)["shard spread"]["default_on"]
    hurts = {n: row((0.2, 0.15), (0.3, 0.10)) for n in "abc"}  # better replay, worse TTFT
    assert not held_out(hurts)["shard spread"]["default_on"]
