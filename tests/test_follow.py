"""The flow model run on placements recorded elsewhere (model/follow.py)."""

from testbed.flowsim.simulator import FlowSimulation
from testbed.model.follow import Followed
from testbed.model.oracle import Oracle
from testbed.model.schedulers import Candidate, RequestInfo, SchedulerContext, make_scheduler
from testbed.model.timing import TimingModel
from testbed.scenario import load_scenario
from testbed.validate.judging.divergence import gap_closed, overlap
from testbed.workloads.build import build_workload
from tests.conftest import ROOT

DEFAULT = str(ROOT / "scenarios" / "default.yaml")
# what a decision is made of, and what follows from it
OUTCOME = ("prefill", "decode", "tier", "transfer_start", "transfer_end", "first_token",
           "done", "ttft", "state")


def _placements(rows) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["prefill"], r["decode"]) for r in rows if r["decode"]}


def _run(sc, key, follow=None):
    sim = FlowSimulation(sc, key, 1, build_workload(sc, 1), follow)
    return sim, sim.run().requests


def _outcomes(rows):
    return {r["id"]: tuple(r[k] for k in OUTCOME) for r in rows}


def test_following_a_run_of_its_own_placements_changes_nothing():
    sc = load_scenario(DEFAULT, {"seeds": 1, "workload.measure_s": 4.0})
    _, free = _run(sc, "cla")
    sim, forced = _run(sc, "cla", _placements(free))
    assert _outcomes(forced) == _outcomes(free)
    assert sim.scheduler.followed == len(_placements(free)) and sim.scheduler.missed == 0


def test_a_scheduler_made_to_follow_another_takes_its_placements_and_its_outcome():
    sc = load_scenario(DEFAULT, {"seeds": 1, "workload.measure_s": 4.0})
    _, cla = _run(sc, "cla")
    _, rr = _run(sc, "rr")
    assert _placements(rr) != _placements(cla)  # else the test shows nothing
    sim, forced = _run(sc, "rr", _placements(cla))
    # the scheduler is only its placements: RR placing as CLA* did is CLA*'s run
    assert _outcomes(forced) == _outcomes(cla)
    assert sim.scheduler.followed == len(_placements(cla))


def _candidate(name: str, free: float) -> Candidate:
    return Candidate(name, free_memory=free, queued=0, batch=0, hit_tokens=0)


def test_a_recorded_choice_that_is_not_possible_here_is_left_to_the_scheduler():
    inner = make_scheduler("la", SchedulerContext(TimingModel()))
    follow = Followed(inner, {"r1": "d9", "r2": "d1"})
    oracle = Oracle({("p0", "d0"): 1, ("p0", "d1"): 2}, {1: 100.0, 2: 50.0}, {1: 5.0, 2: 8.0},
                    {}, 0.0)
    req = RequestInfo("r1", 1000, 1e6)
    cands = [_candidate("d0", 1e9), _candidate("d1", 1e9)]
    assert follow.select(req, "p0", cands, oracle).decode in {"d0", "d1"}  # d9 not listed
    assert (follow.followed, follow.missed) == (0, 1)
    full = [_candidate("d0", 1e9), _candidate("d1", 0.0)]  # d1 listed, but no room
    assert follow.select(RequestInfo("r2", 1000, 1e6), "p0", full, oracle).decode == "d0"
    assert (follow.followed, follow.missed) == (0, 2)
    got = follow.select(RequestInfo("r2", 1000, 1e6), "p0", cands, oracle)
    assert (got.decode, got.tier, follow.followed) == ("d1", 2, 1)
    # every placement, followed or not, counted once in flight as the scheduler's own
    assert inner.inflight.raw(1, "p0") + inner.inflight.raw(2, "p0") == 3


def test_the_share_of_the_gap_that_forcing_closed():
    iv = lambda p: {"point": p, "low": p - 0.1, "high": p + 0.1, "n": 50}  # noqa: E731
    got = gap_closed({"p": {"rr": iv(-0.2), "cla": iv(0.1), "la": iv(0.0)}},
                     {"p": {"rr": iv(-0.05), "cla": iv(-0.2), "la": iv(0.1)}})["p"]
    assert got["rr"]["closed"] == 0.75  # three quarters of it was divergence
    assert got["cla"]["closed"] == -1.0  # following the packets made it twice as wide
    assert got["la"]["closed"] is None  # no gap to close


def test_overlap_counts_what_eq4_sees_apart_from_what_it_does_not():
    def row(rid, prefill, decode, tier, start, end, pred, measured=True):
        return {"id": rid, "prefill": prefill, "decode": decode, "tier": str(tier),
                "transfer_start": str(start), "transfer_end": str(end),
                "predicted_transfer_s": str(pred), "measured": str(measured)}
    rows = [row("a", "p0", "d0", 2, 0.0, 10.0, 5.0, measured=False),  # warm-up, in flight
            row("b", "p1", "d0", 2, 1.0, 4.0, 2.0, measured=False),
            row("c", "p0", "d1", 3, 2.0, 6.0, 2.0),  # meets a (own prefill, tier 2) and b
            row("d", "p0", "d0", 2, 3.0, 5.0, 1.0),  # meets a (counted), b and c
            row("e", "p2", "d2", 0, 3.5, 3.5, 0.0),  # local: no transfer
            row("f", "p1", "", "", "", "", "")]  # never placed
    got = overlap(rows)
    assert got["n"] == 2  # the measured transfers only
    assert got["own"] == 0.5  # c: none on tier 3 from p0; d: a
    assert got["other"] == 1.0  # c: b; d: b
    assert got["into"] == 1.0  # c: none into d1; d: a and b into d0
    assert got["over_predicted"] == (4.0 + 2.0) / (2.0 + 1.0)
    assert overlap(rows[:2]) == {"n": 0}
