"""Competing transfers on one path, packet by packet (root, Open vSwitch): why N transfers
started together take longer than a work-conserving link needs. Figures, never assertions.

For each tier's host pair of the scenario's fabric (the calibration's pairs) and each N:
N transfers of 0.5 GB (modelled) started together, as `testbed calibrate` does, with the
departure trace (testbed/datapath/departures.py) on every switch egress. Printed per run:
each transfer's time against a lone one's and the work-conserving time (N x lone bytes /
the path's bottleneck rate), the TCP stalls their senders saw (segments resent,
retransmission timeouts), and the busiest link's idle share between its first and last
departure with its late departures (late: the machine held a queued link; idle with
none late: the queue was empty, TCP was not sending); and what the machine dropped or
held before the switches' queues (testbed/datapath/input_queues.py: the input backlog's and
the datapath's sockets' drops, the bytes those sockets held, sampled at 100 Hz, and the
wait that makes at the rate the datapath's ports took bytes in: an upper bound).

With --spacing F (a fraction of a lone transfer's time) the N transfers start F lone
times apart instead, and each one's time is printed in arrival order: how much of the
link the first keeps when the next arrives (what max-min sharing splits equally).
--sizes sets the modelled GB per transfer (default the calibration's 0.5).

After the repeats of each competing probe it prints how far each repeat's transfers are
from the other repeats' (leave one out: at the same arrival position, or at any where all
started together): the error of a model that knew every repeat but not which one it
was asked about, the floor for any deterministic flow model on these probes.

Run: sudo .venv/bin/python benchmarks/bench_compete.py [scenarios/validate.yaml]
     [--competing 1,2,4] [--repeats 2] [--tiers 2,3] [--sizes 0.5,2] [--spacing 0,0.25,0.5]
     [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

import yaml

from testbed.cli.common import handle_signals
from testbed.datapath.departures import DepartureTracer
from testbed.datapath.input_queues import IngressReader
from testbed.emulation.ingress import ingress_judgement, machine_drops
from testbed.emulation.net import EmulatedNetwork
from testbed.emulation.threads import vswitchd_pids
from testbed.scenario import load_scenario
from testbed.topologies.replica import scaled_bytes
from testbed.validate.engines.fabric_probes import COMPETE_GB, run_probe
from testbed.validate.judging.validity import tier_pairs


def one(network, src: str, dst: str, n: int, shards: int, size: int, rates: dict,
        trace: Path, spacing_s: float = 0.0) -> dict:
    tracer = DepartureTracer(rates, trace, network.interface_netns).start()
    reader, done = IngressReader(vswitchd_pids()).start(), threading.Event()

    def sample() -> None:  # at the fidelity monitor's 100 Hz
        while not done.wait(0.01):
            reader.sample()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        count = f"{n}@{spacing_s:.4f}" if spacing_s else str(n)
        got = run_probe(network, src, dst, "compete", shards, str(size), count)[0]
    finally:
        spaced, lost = tracer.stop()
        done.set()
        sampler.join()
    ingress = ingress_judgement(reader.stop(), reader.held, reader.fullest, None,
                                reader.intake, reader.at)["figures"]
    # the bottleneck: the link whose bytes take longest at its rate (on a tier-3 path the
    # core links are slower than the uplinks that carry the same bytes; ECMP may split)
    intf, sp = max(spaced.items(), key=lambda x: x[1].sent_bytes / rates[x[0]])
    return {"seconds": got["seconds"], "starts": got.get("starts") or [0.0] * n,
            "tcp": got.get("tcp", []), "link": intf,
            "idle": sp.idle_share(rates[intf]), "late": sp.late, "judged": sp.judged,
            "work_s": sp.sent_bytes * 8 / rates[intf], "lost": lost, "ingress": ingress}


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default="scenarios/validate.yaml")
    ap.add_argument("--competing", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tiers", default=None, help="tiers to probe (default: every tier)")
    ap.add_argument("--sizes", default=str(COMPETE_GB),
                    help="modelled GB per transfer, comma-separated")
    ap.add_argument("--spacing", default="0",
                    help="starts this many lone-transfer times apart (0: together)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a scenario field (e.g. emulation.frame_bytes=414)")
    args = ap.parse_args()
    sc = load_scenario(args.scenario, {key: yaml.safe_load(value) for key, _, value in
                                       (item.partition("=") for item in args.sets)})
    cell = sc.points()[0][1]
    emu = cell.emulation
    spec = cell.cluster.spec()
    shards = cell.network.flows_per_transfer or spec.tp
    sizes = [float(g) for g in args.sizes.split(",")]
    spacings = [float(f) for f in args.spacing.split(",")]
    tiers = {int(t) for t in args.tiers.split(",")} if args.tiers else None
    spread: dict[tuple, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cell_file = Path(tmp) / "scenario.yaml"
        cell_file.write_text(yaml.safe_dump(cell.model_dump(mode="json"), sort_keys=False))
        with EmulatedNetwork(cell, cell_file, Path(tmp)) as network:
            fabric = network.fabric
            rates = {intf: link.rate_bps for node, intf, link in fabric.egress_interfaces()
                     if node in fabric.switches}
            print(f"{args.scenario}: scale {emu.scale:g}, dilation {emu.time_dilation:g}, "
                  f"{emu.frame_bytes}-byte frames, {shards} shards per transfer; wall seconds")
            for tier, (src, dst) in tier_pairs(spec).items():
                if tiers and tier not in tiers:
                    continue
                for gb in sizes:
                    size = scaled_bytes(gb * 1e9, emu.scale)
                    lone = min(one(network, src, dst, 1, shards, size, rates,
                                   Path(tmp) / "t")["seconds"][0] for _ in range(args.repeats))
                    print(f"tier {tier} {src}->{dst} {gb:g} GB ({size} wire bytes): lone "
                          f"{lone:.3f}", flush=True)
                    for n in (int(c) for c in args.competing.split(",")):
                        for f in spacings:
                            if n == 1 and f:
                                continue
                            runs = []
                            for _ in range(args.repeats):
                                runs.append(_report(tier, gb, n, f, lone, one(
                                    network, src, dst, n, shards, size, rates,
                                    Path(tmp) / "t", f * lone)))
                            if n > 1:
                                spread[(tier, gb, n, f)] = _spread(runs, together=not f)
                                _print_spread(f"tier {tier} {gb:g} GB N={n} spacing {f:g}",
                                              spread[(tier, gb, n, f)])
            if spread:
                _print_spread("all competing probes", [e for v in spread.values() for e in v])


def _spread(runs: list[list[float]], together: bool) -> list[float]:
    """Each transfer's time against the median of the other repeats' (leave one out): at
    the same arrival position, or any position where all started together (which of them
    wins is not theirs to know). What the best deterministic model of these probes would
    err by, since it cannot tell one repeat of the same probe from another."""
    errors = []
    for i, run in enumerate(runs):
        others = [r for k, r in enumerate(runs) if k != i]
        for j, t in enumerate(run):
            pool = [x for r in others for x in r] if together else [r[j] for r in others]
            if pool:
                errors.append(t / statistics.median(pool) - 1)
    return errors


def _print_spread(label: str, errors: list[float]) -> None:
    if not errors:
        return
    size = sorted(abs(e) for e in errors)
    print(f"{label}: repeat against repeats, n={len(errors)}: median |error| "
          f"{size[len(size) // 2]:.1%}, p90 {size[int(0.9 * (len(size) - 1))]:.1%}, "
          f"largest {size[-1]:.1%}", flush=True)


def _report(tier: int, gb: float, n: int, spacing: float, lone: float, r: dict
            ) -> list[float]:
    """Print one run; its transfers' times in arrival order."""
    order = sorted(range(len(r["seconds"])), key=lambda j: r["starts"][j])
    secs = [r["seconds"][j] for j in order]
    rto = [int(t.get("timeouts") or 0) for t in r["tcp"]]
    rtt = [t["rtt_s"] * 1e3 for t in r["tcp"] if t.get("rtt_s") is not None]
    resent = [int(t.get("retrans_segs") or 0) for t in r["tcp"]]
    sent = sum(int(t.get("data_segs_out") or 0) for t in r["tcp"])
    busy = sum(t.get("busy_s") or 0.0 for t in r["tcp"])
    rwnd = sum(t.get("rwnd_limited_s") or 0.0 for t in r["tcp"])
    sndbuf = sum(t.get("sndbuf_limited_s") or 0.0 for t in r["tcp"])
    print(f"tier {tier} {gb:g} GB N={n} spacing {spacing:g} lone: in arrival order "
          + " ".join(f"{x:.3f}" for x in secs)
          + f" (x lone: {' '.join(f'{x / lone:.2f}' for x in secs)}); work-conserving "
          f"{r['work_s']:.3f}; RTOs {rto}, resent {resent} of {sent} sent; senders busy "
          f"{busy:.2f} s, of it receive-window limited {_share(rwnd, busy)}, send-buffer "
          f"limited {_share(sndbuf, busy)}; round trip at the end "
          f"{_range(rtt)} ms wall; busiest {r['link']} idle "
          f"{r['idle']:.0%} of its span, {r['late']} of {r['judged']} queued departures "
          f"late, {r['lost']} events lost; {_held(r['ingress'])}", flush=True)
    return secs


def _held(g: dict) -> str:
    if not g["held_samples"]:
        return "datapath buffers not sampled"
    return (f"machine drops {machine_drops(g)}, datapath buffers held "
            f"p99 {g['held_p99_bytes'] / 1e3:.1f} KB (fullest socket {g['fullest_share']:.0%}), "
            f"a wait of at most {_ms(g['wait_mean_ms'])} mean, {_ms(g['wait_p99_ms'])} p99 "
            f"per switch (wall; the ports took in {g['intake_mb_per_s']} MB/s)")


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _range(xs: list[float]) -> str:
    return f"{min(xs):.1f}-{max(xs):.1f}" if xs else "-"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} ms"


if __name__ == "__main__":
    main()
