"""KV through the testbed's pusher and through Mooncake's Transfer Engine, side by side on
the emulated fabric (root, Open vSwitch): printed, never asserted.

Per row (validate.yaml's rag workload, the ToR-uplink collision and long-context rows of
bench_validate.py) and transport (`emulation.kv_transport: pusher | mooncake`), one
`testbed emulate` with every scheduler and the seeds asked for, run one after the other
on this machine. Printed per row and transport:
- whole transfers (P2D, a request's first shard's start to its last shard's end, modelled
  s): median and p90, and under RR, whose decisions do not depend on the transfers, the
  median ratio mooncake / pusher over the same requests;
- mean TTFT per scheduler and NetKV-Full's and CLA*'s gains over RR (and Full over CLA*);
- faithful runs, and the CPU: the workers' busiest thread (median share of a core) and
  Open vSwitch's wait for a core (docs/fidelity.md's faithfulness test);
- on the wire (one captured ToR uplink): TCP connections per transfer, packets per
  connection, data bytes per packet and retransmitted segments;
- the senders' TCP_INFO (transfers.csv): segments resent per transfer, the share of
  transfers that waited out a retransmission timeout, the median smoothed RTT.
After each row, its claims judged as `testbed validate` judges them (paired by request
over the seeds both transports ran faithfully, block-bootstrap 95% intervals): each
scheduler's mean-TTFT gain through the pusher, through the engine, and the engine's
minus the pusher's, agreeing where that difference lies within the 5-point band.
--dilations runs the rows again at other time dilations: where the engine's runs become
faithful on this machine. --engine ns3 (or flow) runs the same rows and seeds on ns-3 (or
the flow model) instead, which carry the engine's lanes and notice but not its
receiver's acknowledgements (no root needed; every run counts as faithful, nothing is
captured): how much of the emulation's difference those two explain.

Run: sudo .venv/bin/python benchmarks/bench_transport.py [--rows rag,uplink-collision,long-context]
     [--seeds 1] [--dilations 2] [--engine emulation|ns3|flow] [--jobs N] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import yaml

from testbed.api import emulate, simulate
from testbed.cli.common import handle_signals
from testbed.scenario import load_scenario
from testbed.topologies.traffic_classes import kv_ports
from testbed.validate.judging.claims import PRIMARY, judge_point, pair_requests
from testbed.validate.judging.decision import on_packets

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "scenarios" / "validate.yaml"
ROWS = {
    "rag": (BASE, {}),
    "uplink-collision": (ROOT / "scenarios" / "validate-uplink-collision.yaml", {}),
    "long-context": (BASE, {"workload.profile": "long-context"}),
}
TRANSPORTS = ("pusher", "mooncake")
CAPTURED = "tor0>agg0"


def rows_of(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def transfer_times(seed_dir: Path) -> dict[str, float]:
    """request -> whole P2D transfer time (modelled s), every request that had one."""
    out = {}
    for r in rows_of(seed_dir / "requests.csv"):
        if r["transfer_start"] and r["transfer_end"] and float(r["transfer_bytes"] or 0) > 0:
            out[r["id"]] = float(r["transfer_end"]) - float(r["transfer_start"])
    return out


def mean_ttft(seed_dirs: list[Path]) -> float | None:
    ttfts = [float(r["ttft"]) for d in seed_dirs for r in rows_of(d / "requests.csv")
             if r["measured"] == "True" and r["ttft"]]
    return statistics.fmean(ttfts) if ttfts else None


def wire(seed_dir: Path, ports: tuple[int, ...]) -> dict | None:
    """What one captured uplink carried of KV: connections, packets, bytes a packet."""
    path = seed_dir / "capture" / "flows.csv"
    if not path.exists():
        return None
    data = [f for f in rows_of(path) if f["class"] == "kv" and int(f["dport"]) in ports
            and int(f["bytes"]) > 10_000]
    if not data:
        return None
    transfers = {t["request"] for t in rows_of(seed_dir / "transfers.csv")
                 if _crosses(t["path"])}
    packets = sum(int(f["packets"]) for f in data)
    return {"connections": len(data), "transfers": len(transfers),
            "packets_per_connection": packets / len(data),
            "bytes_per_packet": sum(int(f["bytes"]) for f in data) / packets,
            "retransmits": sum(int(f["retransmits"]) for f in data)}


def senders(seed_dir: Path) -> dict:
    """What the senders' TCP_INFO said of the P2D transfers (transfers.csv's sender
    columns: the pusher's per connection, the engine's read by descriptor): segments
    resent, transfers with a retransmission timeout, smoothed RTTs (modelled s)."""
    rows = [r for r in rows_of(seed_dir / "transfers.csv") if r.get("retrans_segs")]
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["request"], []).append(r)
    return {"transfers": len(by), "resent": sum(int(r["retrans_segs"]) for r in rows),
            "with_rto": sum(any(int(r["timeouts"] or 0) > 0 for r in rs) for rs in by.values()),
            "rtts": [float(r["rtt_s"]) for r in rows if r.get("rtt_s")]}


def _crosses(path: str) -> bool:
    hops = path.split(">")
    return any(f"{a}>{b}" == CAPTURED for a, b in zip(hops, hops[1:], strict=False))


def cpu(fid: dict) -> tuple[float | None, float | None]:
    """The workers' busiest thread (share of a core) and OVS's wait share."""
    busy = [t["busy_median"] for t in fid.get("threads") or []
            if t.get("role") == "worker" and t.get("busy_median") is not None]
    ovs = fid.get("datapath_thread") or {}
    return (max(busy) if busy else None), ovs.get("wait_median")


def fidelity(seed_dir: Path) -> dict:
    """A run's fidelity.json; a simulated engine's runs are faithful by construction."""
    path = seed_dir / "fidelity.json"
    return json.loads(path.read_text()) if path.exists() else {"verdict": "faithful"}


def summarise(folder: Path, scenario) -> dict:
    base = folder / "cells" / "000-base"
    out: dict = {"ttft": {}, "faithful": 0, "runs": 0, "reasons": [], "busy": [], "wait": [],
                 "times": {}, "wire": [], "failed": 0, "requests": 0,
                 "tcp": {"transfers": 0, "resent": 0, "with_rto": 0, "rtts": []}}
    ports = kv_ports(scenario.emulation.kv_port, scenario.emulation.kv_transport)
    for sched in scenario.schedulers:
        seeds = sorted((base / sched).glob("seed*"))
        out["ttft"][sched] = mean_ttft(seeds)
        for d in seeds:
            fid = fidelity(d)
            out["runs"] += 1
            out["faithful"] += fid.get("verdict") == "faithful"
            out["reasons"] += fid.get("reasons") or []
            busy, wait = cpu(fid)
            out["busy"] += [busy] if busy is not None else []
            out["wait"] += [wait] if wait is not None else []
            out["times"].update({(sched, d.name, k): v for k, v in transfer_times(d).items()})
            states = [r["state"] for r in rows_of(d / "requests.csv")]
            out["requests"] += len(states)
            out["failed"] += states.count("failed")
            for k, v in senders(d).items():
                out["tcp"][k] += v
            if (w := wire(d, ports)) is not None:
                out["wire"].append(w)
    return out


def claims(folders: dict[str, Path], scenario) -> list[str]:
    """The row's mean-TTFT claims through each transport and their difference, judged by
    the validation's own code with the pusher in the packets' place and the engine in
    the flow model's (the difference is then the engine's gain minus the pusher's)."""
    runs = {}
    for engine, transport in (("packets", "pusher"), ("flow", "mooncake")):
        if transport not in folders:
            return []
        base = folders[transport] / "cells" / "000-base"
        for sched in scenario.schedulers:
            for d in sorted((base / sched).glob("seed*")):
                if fidelity(d).get("verdict") == "faithful":
                    runs[(engine, sched, int(d.name[4:]))] = rows_of(d / "requests.csv")
    point = judge_point(pair_requests(runs))
    out = []
    for c in point.claims:
        if c.metric != PRIMARY:
            continue
        seeds = len({k for e, s, k in runs if s == c.scheduler})
        out.append(f"| {c.scheduler} vs {c.baseline} | {_iv(c.packets)} "
                   f"{c.on_packets} | {_iv(c.flow)} {on_packets(c.flow, False)} | "
                   f"{_iv(c.difference, points=True)} {c.verdict} | {c.n} ({seeds}) |")
    return out


def _iv(iv, points: bool = False) -> str:
    if points:
        return f"{100 * iv.point:+.1f} [{100 * iv.low:+.1f}, {100 * iv.high:+.1f}]"
    return f"{100 * iv.point:+.1f}% [{100 * iv.low:+.1f}, {100 * iv.high:+.1f}]"


def gain(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{100 * (b - a) / a:+.1f}%"


def line(row: str, transport: str, dilation: float | None, s: dict, pusher: dict | None
         ) -> str:
    times = list(s["times"].values())
    q = statistics.quantiles(times, n=10) if len(times) >= 10 else None
    ratio = "-"
    if pusher is not None:
        same = [s["times"][k] / pusher["times"][k] for k in s["times"]
                if k[0] == "rr" and k in pusher["times"] and pusher["times"][k] > 0]
        ratio = f"{statistics.median(same):.2f} (n={len(same)})" if same else "-"
    t = s["ttft"]
    w = s["wire"]
    wire_text = "-" if not w else (
        f"{sum(x['connections'] for x in w) / max(1, sum(x['transfers'] for x in w)):.1f} conn/"
        f"transfer, {statistics.fmean(x['packets_per_connection'] for x in w):.0f} pkt/conn, "
        f"{statistics.fmean(x['bytes_per_packet'] for x in w):.0f} B/pkt, "
        f"{sum(x['retransmits'] for x in w)} retx")
    return (f"| {row} | {transport} | {'-' if dilation is None else f'{dilation:g}'} | "
            f"{statistics.median(times) if times else float('nan'):.3f} / "
            f"{q[-1] if q else float('nan'):.3f} | {ratio} | "
            + " / ".join(f"{k} {v * 1e3:.0f}" if v else f"{k} -" for k, v in t.items())
            + f" | {gain(t.get('rr'), t.get('netkv-full'))} / {gain(t.get('rr'), t.get('cla'))}"
            f" / {gain(t.get('cla'), t.get('netkv-full'))} | {s['faithful']}/{s['runs']} "
            f"({s['failed']}/{s['requests']}) | "
            f"{max(s['busy']) if s['busy'] else float('nan'):.2f} / "
            f"{statistics.median(s['wait']) if s['wait'] else float('nan'):.2f} | "
            f"{wire_text} | {_tcp_text(s['tcp'])} |")


def _tcp_text(tcp: dict) -> str:
    n = tcp["transfers"]
    if not n:
        return "-"
    rtt = statistics.median(tcp["rtts"]) * 1e3 if tcp["rtts"] else float("nan")
    return (f"{tcp['resent'] / n:.1f} resent/transfer, {100 * tcp['with_rto'] / n:.0f}% "
            f"with an RTO, srtt {rtt:.1f} ms")


def main() -> None:
    handle_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--seeds", type=int, default=1, help="seeds a row and transport")
    ap.add_argument("--dilations", type=float, nargs="+", default=[None],
                    help="time dilations to run each row at (default: the row's own)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--engine", choices=("emulation", "ns3", "flow"), default="emulation",
                    help="where the rows run (ns3, flow: no root, nothing captured)")
    ap.add_argument("--jobs", type=int, default=1, help="processes for ns3 or flow")
    ap.add_argument("--out", default="/tmp/netkv-bench-transport")
    args = ap.parse_args()
    print("| row | transport | dilation | whole transfer median / p90 (s) | mooncake / pusher, "
          "same RR transfer (median) | mean TTFT per scheduler (ms) | gains Full/RR, CLA*/RR, "
          "Full/CLA* | faithful (failed requests) | workers' busiest thread / OVS wait | on the wire "
          f"({CAPTURED}) | senders' TCP_INFO | wall |")
    print("|---" * 12 + "|")
    for name in args.rows.split(","):
        path, over = ROWS[name]
        for dilation in args.dilations:
            pusher, folders = None, {}
            for transport in args.transports.split(","):
                sets = {**over, "seeds": args.seeds, "emulation.kv_transport": transport}
                if args.engine == "emulation":
                    sets["emulation.capture"] = [CAPTURED]
                if dilation is not None:
                    sets["emulation.time_dilation"] = dilation
                for item in args.sets:
                    key, _, value = item.partition("=")
                    sets[key] = yaml.safe_load(value)
                sc = load_scenario(path, sets)
                t0 = time.perf_counter()
                where = Path(args.out) / name / transport
                result = (emulate(sc, where) if args.engine == "emulation" else
                          simulate(sc, where, jobs=args.jobs, engine=args.engine))
                wall = time.perf_counter() - t0
                folders[transport] = Path(result.folder)
                s = summarise(Path(result.folder), sc)
                dilated = sc.emulation.time_dilation if args.engine == "emulation" else None
                print(line(name, transport, dilated, s, pusher)
                      + f" {wall:.0f} s |", flush=True)
                if s["reasons"]:
                    print(f"  unfaithful: {sorted(set(s['reasons']))[:3]}", flush=True)
                if transport == "pusher":
                    pusher = s
            judged = claims(folders, sc)
            if judged:
                at = (f"at dilation {sc.emulation.time_dilation:g}" if args.engine == "emulation"
                      else f"on {args.engine}")
                print(f"\n{name} {at}, faithful seeds:"
                      "\n\n| claim (mean TTFT) | pusher | engine | engine - pusher (points) "
                      "| requests (seeds) |\n" + "|---" * 5 + "|\n" + "\n".join(judged)
                      + "\n", flush=True)


if __name__ == "__main__":
    main()
