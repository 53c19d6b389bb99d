"""The verdicts read from run folders: which runs were faithful, per-scheduler TTFT
verdicts, per-seed rankings and the paper's claims (claims.py) of every sweep point.
Cells are keyed point/scheduler/seedN, as sections.cells_of gives them."""

from __future__ import annotations

from pathlib import Path

from testbed.inputs import read_json
from testbed.records import read_csv
from testbed.validate.judging import claims, model_errors, stats
from testbed.validate.judging.decision import ttft_agreement
from testbed.validate.judging.trajectory import draw_spreads
from testbed.validate.judging.words import ttft_sentence


def faithful_cells(cells: dict[str, Path]) -> tuple[dict[str, Path], list[str]]:
    """Cells whose run the fidelity monitor passed, and the keys of those it flagged."""
    kept, flagged = {}, []
    for key, cell in cells.items():
        verdict = read_json((cell / "summary.json"), object).get("fidelity", "faithful")
        (kept.__setitem__(key, cell) if verdict == "faithful" else flagged.append(key))
    return kept, flagged


def ttft_verdicts(emu_cells: dict[str, Path], flow_cells: dict[str, Path]) -> dict:
    """point -> scheduler -> paired TTFT interval and verdict, pooled over seeds."""
    pooled: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for key, cell in emu_cells.items():
        if key not in flow_cells:
            continue
        point, sched, _ = key.split("/")
        ref, mod = model_errors.paired_ttft(read_csv(cell / "requests.csv"),
                                       read_csv(flow_cells[key] / "requests.csv"))
        acc = pooled.setdefault((point, sched), ([], []))
        acc[0].extend(ref)
        acc[1].extend(mod)
    out: dict[str, dict] = {}
    for (point, sched), (ref, mod) in sorted(pooled.items()):
        iv = stats.paired_mean_error(ref, mod)
        verdict = ttft_agreement(iv)
        out.setdefault(point, {})[sched] = {**iv.as_dict(), "verdict": verdict,
                                            "sentence": ttft_sentence(iv, verdict)}
    return out


def seed_rankings(emu_cells: dict[str, Path], flow_cells: dict[str, Path]) -> dict:
    """point -> per-seed ranking agreement by mean TTFT (seeds where all schedulers ran)."""
    by: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    for key, cell in emu_cells.items():
        if key not in flow_cells:
            continue
        point, sched, seed = key.split("/")
        ref = read_json((cell / "summary.json"), object).get("ttft_mean_ms")
        mod = read_json((flow_cells[key] / "summary.json"), object).get("ttft_mean_ms")
        by.setdefault((point, seed), {})[sched] = (ref, mod)
    orders: dict[str, list] = {}
    for (point, _seed), scores in sorted(by.items()):
        if len(scores) < 2 or any(v is None or v != v for pair in scores.values() for v in pair):
            continue
        orders.setdefault(point, []).append(
            (model_errors.ranking({k: v[0] for k, v in scores.items()}),
             model_errors.ranking({k: v[1] for k, v in scores.items()})))
    return {point: stats.seed_agreement(o) for point, o in orders.items()}


def draw_rankings(emu_cells: dict[str, Path], group_of: dict[int, int] | None) -> dict:
    """point -> how often two packet runs of one workload (draws of it: workload.segments)
    rank the schedulers alike by mean TTFT: {pairs, alike, share}. A per-seed ranking is
    one draw, so this is how often a model that ranked as the packets do on the whole
    could match any one seed's. Empty where no workload ran twice."""
    if not group_of:
        return {}
    scores: dict[tuple[str, int], dict[str, float]] = {}
    for key, cell in emu_cells.items():
        point, sched, seed = key.split("/")
        mean = read_json((cell / "summary.json"), object).get("ttft_mean_ms")
        if mean is not None and mean == mean:
            scores.setdefault((point, int(seed.removeprefix("seed"))), {})[sched] = mean
    full = max((len(v) for v in scores.values()), default=0)
    orders: dict[tuple[str, int], list] = {}
    for (point, seed), by in sorted(scores.items()):
        if len(by) == full > 1:
            orders.setdefault((point, group_of.get(seed, seed)), []).append(model_errors.ranking(by))
    out: dict[str, dict] = {}
    for (point, _), ranked in orders.items():
        pairs = [a == b for i, a in enumerate(ranked) for b in ranked[i + 1:]]
        acc = out.setdefault(point, {"pairs": 0, "alike": 0})
        acc["pairs"] += len(pairs)
        acc["alike"] += sum(pairs)
    return {point: {**acc, "share": acc["alike"] / acc["pairs"]}
            for point, acc in out.items() if acc["pairs"]}


def point_claims(emu_cells: dict[str, Path], flow_cells: dict[str, Path],
                 level: float = stats.CONFIDENCE, normal: bool = False,
                 replayed: dict[str, list[dict]] | None = None,
                 draws: dict[str, dict] | None = None,
                 group_of: dict[int, int] | None = None) -> dict:
    """point -> the paper's claims judged on both engines (testbed/validate/judging/claims.py);
    a seed enters only if every scheduler's packet run of it is in `emu_cells`.
    `replayed` (cell key -> the replay's transfer rows) adds the gains at the packets'
    own decisions; `draws` (point -> trajectory.pooled), the draws' spread to the
    mean-TTFT verdicts; `group_of` (workloads.build.seed_groups), which seeds replay one
    workload."""
    runs: dict[str, dict] = {}
    for engine, cells in (("packets", emu_cells), ("flow", flow_cells)):
        for key, cell in cells.items():
            point, sched, seed = key.split("/")
            rows = read_csv(cell / "requests.csv")
            runs.setdefault(point, {})[(engine, sched, int(seed.removeprefix("seed")))] = rows
            if engine == "packets" and replayed is not None and key in replayed:
                runs[point][(claims.REPLAY, sched, int(seed.removeprefix("seed")))] = \
                    claims.replayed_requests(rows, read_csv(cell / "transfers.csv"),
                                             replayed[key])
    return {point: claims.judge_point(claims.pair_requests(r, group_of), level, normal,
                                      spreads=draw_spreads((draws or {}).get(point))).as_dict()
            for point, r in sorted(runs.items())}
