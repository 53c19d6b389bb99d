"""`testbed calibrate`: per-tier achieved bandwidth of lone KV transfers on the fabric.

For each tier with a host pair, a probe receiver runs in the destination host and a
probe sender in the source host sends lone transfers of several sizes (TP shards in
parallel, AF41, as workers do). The fit (testbed.validate.calibration) gives each tier's
capacity factor for the flow model and the fixed cost per transfer.
"""

from __future__ import annotations

import json
import subprocess
import sys

from testbed.emulation.net import EmulatedNetwork, _die_with_parent
from testbed.emulation.processes import NamespaceLauncher
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.validate.calibration import TierFit, capacity_factors, fit_tier
from testbed.workers.kvstream import scaled_bytes

PROBE_GB = (0.5, 1.0, 2.0, 4.0, 8.0)  # modelled sizes: the span of RAG KV transfers
PROBE_PORT_OFFSET = 2  # kv_port + 2


def tier_pairs(spec) -> dict[int, tuple[str, str]]:
    """One (src, dst) pair per tier 1-3, prefill -> decode where the placement has one."""
    prefill = {i.name for i in spec.prefill_pool}
    names = [i.name for i in spec.instances]
    pairs: dict[int, tuple[str, str]] = {}
    ordered = sorted(((a, b) for a in names for b in names if a != b),
                     key=lambda p: (p[0] not in prefill, p[1] in prefill))
    for a, b in ordered:
        t = spec.tier(a, b)
        if t > 0 and t not in pairs:
            pairs[t] = (a, b)
    return dict(sorted(pairs.items()))


def _probe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.workers.probe", *args]


def measure_tier(network: EmulatedNetwork, src: str, dst: str, sizes_wire: list[int],
                 shards: int) -> list[tuple[int, float]]:
    """(wire bytes, wall seconds) per lone transfer src -> dst."""
    launcher = NamespaceLauncher(network)
    ip = network.fabric.hosts[dst].ip
    port = network.scenario.emulation.kv_port + PROBE_PORT_OFFSET
    recv = subprocess.Popen(launcher.command(dst, _probe_cmd("recv", ip, str(port))),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_die_with_parent)
    try:
        line = recv.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"probe receiver in {dst} failed: {line}{recv.stdout.read()}")
        send = subprocess.run(
            launcher.command(src, _probe_cmd("send", ip, str(port), str(shards),
                                             network.scenario.emulation.tcp_congestion,
                                             *map(str, sizes_wire))),
            capture_output=True, text=True, timeout=600, preexec_fn=_die_with_parent)
        if send.returncode != 0:
            raise RuntimeError(f"probe sender in {src} failed: {send.stderr.strip()[-500:]}")
        return [(int(d["bytes"]), float(d["seconds"]))
                for d in map(json.loads, send.stdout.splitlines())]
    finally:
        recv.terminate()
        try:
            recv.wait(timeout=5)
        except subprocess.TimeoutExpired:
            recv.kill()


def calibrate(network: EmulatedNetwork, on_step=None) -> dict:
    """Measure every tier; return the calibration document (calibration.json)."""
    sc = network.scenario
    spec = sc.cluster.spec()
    emu = sc.emulation
    shards = sc.network.flows_per_transfer or spec.tp
    fits: list[TierFit] = []
    raw = {}
    for tier, (src, dst) in tier_pairs(spec).items():
        if on_step:
            on_step(f"calibrating tier {tier} ({src} -> {dst})")
        modelled = [gb * 1e9 for gb in PROBE_GB]
        wire = [scaled_bytes(b, emu.scale) for b in modelled]
        got = measure_tier(network, src, dst, wire, shards)
        samples = [(m, secs / emu.time_dilation) for m, (_, secs) in zip(modelled, got, strict=True)]
        raw[str(tier)] = {"pair": [src, dst],
                          "samples": [{"bytes": b, "seconds": s} for b, s in samples]}
        fits.append(fit_tier(tier, samples, gbps_to_bytes_per_s(spec.tier_bandwidth_gbps[tier])))
    return {
        "scenario": sc.name, "scale": emu.scale, "time_dilation": emu.time_dilation,
        "capacity_factor": capacity_factors(fits),
        "tiers": {str(f.tier): {"factor": f.factor, "overhead_s": f.overhead_s,
                                "r2": f.r2, **raw[str(f.tier)]} for f in fits},
    }
