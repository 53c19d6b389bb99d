"""`testbed calibrate`: per-tier achieved bandwidth of lone KV transfers on the fabric.

For each tier with a host pair, a probe receiver runs in the destination host and a
probe sender in the source host sends lone transfers of several sizes (TP shards in
parallel, AF41, as workers do). The fit (testbed.validate.judging.calibration) gives each tier's
capacity factor for the flow model and the fixed cost per transfer.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

from testbed.emulation.child import die_with_parent
from testbed.emulation.net import EmulatedNetwork
from testbed.emulation.processes import NamespaceLauncher
from testbed.flowsim.network import FluidNetwork
from testbed.model import tcp
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.topologies.replica import scaled_bytes
from testbed.validate.engines.contention import competing_residuals, probe_fits
from testbed.validate.judging.calibration import (
    CAPACITY_FIT_MIN_GB,
    TierFit,
    capacity_factors,
    fit_capacity,
    fit_tcp,
)
from testbed.validate.judging.validity import tier_pairs

# modelled sizes per transfer, three decades: chatbot's small KV (tens of MB per shard)
# up to RAG's largest; the small ones are what the TCP terms are fitted on
PROBE_GB = (0.008, 0.032, 0.128, 0.5, 2.0, 8.0)
COMPETE_GB = 0.5  # modelled size of each competing transfer
COMPETING = (1, 2, 4, 8)  # transfers of COMPETE_GB started together on one path
# more competing probes per tier, (modelled GB each, how many, start spacing in lone
# transfers of COMPETE_GB): the other two decades of size, and starts that do not
# coincide (each transfer half a lone transfer's time after the previous; two large ones
# a lone transfer apart, so the first still sends long after the second joins: what the
# join stall is fitted on)
COMPETE_MORE = ((0.032, 8, 0.0), (2.0, 2, 0.0), (COMPETE_GB, 4, 0.5), (2.0, 2, 1.0))
SPREAD_REPEATS = 6  # more lone transfers of COMPETE_GB per tier: the shard spread is noisy
# the large lone sizes again, twice: the capacity is fitted on each size's fastest, since a
# retransmission timeout can stall any one transfer for 200 ms
REPEAT_GB = (2.0, 8.0) * 2
PROBE_PORT_OFFSET = 2  # kv_port + 2


def _probe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.workers.probe", *args]


def run_probe(network: EmulatedNetwork, src: str, dst: str, mode: str, shards: int,
              *args: str) -> list[dict]:
    """One probe sender run src -> dst (`mode` send | compete; testbed.workers.probe) with a
    receiver in dst; its JSON lines."""
    launcher = NamespaceLauncher(network)
    emu = network.scenario.emulation
    ip = network.fabric.hosts[dst].ip
    keep = ["--keep"] if emu.kv_connections == "persistent" else []
    # through Mooncake's engine when it moves the run's KV, on the engine's own ports
    engine = emu.kv_transport == "mooncake"
    port = emu.kv_port if engine else emu.kv_port + PROBE_PORT_OFFSET
    listen = [*keep, "--engine", "listen"] if engine else []
    # the receiver's log apart from its ready line: the engine logs before it is ready
    with tempfile.TemporaryFile(mode="w+") as log:
        recv = subprocess.Popen(
            launcher.command(dst, _probe_cmd(*listen, "recv", ip, str(port))),
            stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=die_with_parent)
        try:
            endpoint = await_ready(recv, log, dst)
            target = ["--engine", endpoint, network.fabric.hosts[src].ip] if engine else [ip]
            send = subprocess.run(
                launcher.command(src, _probe_cmd(*keep, *target[:-1], mode, target[-1],
                                                 str(port), str(shards), emu.tcp_congestion,
                                                 *args)),
                capture_output=True, text=True, timeout=600, preexec_fn=die_with_parent)
            if send.returncode != 0:
                raise RuntimeError(f"probe sender in {src} failed: "
                                   f"{send.stderr.strip()[-500:]}")
            return [json.loads(line) for line in send.stdout.splitlines()]
        finally:
            recv.terminate()
            try:
                recv.wait(timeout=5)
            except subprocess.TimeoutExpired:
                recv.kill()


def await_ready(recv: subprocess.Popen, log, where: str) -> str:
    """The rest of a probe receiver's "ready" line (the engine's endpoint, or nothing);
    a receiver that says anything else is stopped and its log quoted."""
    line = recv.stdout.readline()
    ready, _, endpoint = line.strip().partition(" ")
    if ready != "ready":
        recv.kill()
        recv.wait()
        log.seek(0)
        raise RuntimeError(f"probe receiver in {where} failed: {line}{log.read()[-2000:]}")
    return endpoint


def measure_tier(network: EmulatedNetwork, src: str, dst: str, sizes_wire: list[int],
                 shards: int) -> list[tuple[int, float, list[float]]]:
    """(wire bytes, wall seconds, each shard's wall end) per lone transfer src -> dst."""
    return [(int(d["bytes"]), float(d["seconds"]), [float(x) for x in d.get("shards", [])])
            for d in run_probe(network, src, dst, "send", shards, *map(str, sizes_wire))]


def calibrate(network: EmulatedNetwork, on_step=None) -> dict:
    """Measure every tier on the fabric; return the calibration document."""
    return calibration_document(network.scenario, measure(network, on_step))


def measure(network: EmulatedNetwork, on_step=None) -> dict[str, dict]:
    """Every tier's lone, repeated and competing probes on the fabric, in modelled bytes
    and seconds (tier -> {pair, samples, spread_samples, competing})."""
    scenario = network.scenario
    spec = scenario.cluster.spec()
    emu = scenario.emulation
    shards = scenario.network.flows_per_transfer or spec.tp
    raw = {}
    for tier, (src, dst) in tier_pairs(spec).items():
        if on_step:
            on_step(f"calibrating tier {tier} ({src} -> {dst})")
        modelled = [gb * 1e9 for gb in PROBE_GB]
        wire = [scaled_bytes(b, emu.scale) for b in modelled]
        got = measure_tier(network, src, dst, wire, shards)
        raw[str(tier)] = {"pair": [src, dst],
                          "samples": [{"bytes": m, "seconds": emu.dilation.modelled(secs),
                                       "shards": [emu.dilation.modelled(x) for x in ends]}
                                      for m, (_, secs, ends) in zip(modelled, got, strict=True)]}
        repeats = measure_tier(network, src, dst,
                               [scaled_bytes(COMPETE_GB * 1e9, emu.scale)] * SPREAD_REPEATS, shards)
        raw[str(tier)]["spread_samples"] = [
            {"bytes": COMPETE_GB * 1e9, "seconds": emu.dilation.modelled(secs),
             "shards": [emu.dilation.modelled(x) for x in ends]} for _, secs, ends in repeats]
        again = [gb * 1e9 for gb in REPEAT_GB]
        raw[str(tier)]["repeat_samples"] = [
            {"bytes": m, "seconds": emu.dilation.modelled(secs)} for m, (_, secs, _) in zip(
                again, measure_tier(network, src, dst,
                                    [scaled_bytes(b, emu.scale) for b in again], shards),
                strict=True)]
        if on_step:
            on_step(f"calibrating tier {tier}: {', '.join(map(str, COMPETING))} competing")
        lone_wall = statistics.median(secs for _, secs, _ in repeats)
        plan = [(COMPETE_GB, [str(n) for n in COMPETING], 0.0)] + [
            (gb, [f"{n}@{spacing * lone_wall:.4f}" if spacing else str(n)],
             spacing * lone_wall) for gb, n, spacing in COMPETE_MORE]
        raw[str(tier)]["competing"] = [
            {"bytes": gb * 1e9, "competing": d["competing"],
             "asked_spacing_s": emu.dilation.modelled(asked),
             "starts": [emu.dilation.modelled(x) for x in d.get("starts", [])],
             "seconds": [emu.dilation.modelled(x) for x in d["seconds"]]}
            for gb, counts, asked in plan
            for d in run_probe(network, src, dst, "compete", shards,
                               str(scaled_bytes(gb * 1e9, emu.scale)), *counts)]
    return raw


def lone_samples(doc: dict) -> list[tuple[float, float]]:
    """(modelled bytes, seconds) of a tier's lone probes large enough for the capacity."""
    return [(d["bytes"], d["seconds"]) for key in ("samples", "spread_samples", "repeat_samples")
            for d in doc.get(key, []) if d["bytes"] >= CAPACITY_FIT_MIN_GB * 1e9]


def calibration_document(scenario, raw: dict[str, dict], payload_share: float | None = None) -> dict:
    """calibration.json from a packet engine's probes (`measure` on the fabric, or the
    same plan on ns-3: validate/engines/ns3_probes.py): each tier's capacity factor fitted on the
    large lone transfers (small ones are the replica's start-up, fitted as the TCP terms,
    which the cluster would not pay) and capped at `payload_share` (the engine's wire;
    default the emulation's frame), the TCP terms, the probe fits and both models' error
    on the competing transfers."""
    spec = scenario.cluster.spec()
    shards = scenario.network.flows_per_transfer or spec.tp
    share = tcp.payload_share(scenario.emulation.frame_bytes) if payload_share is None \
        else payload_share
    fits: list[TierFit] = []
    for tier, doc in raw.items():
        fits.append(fit_capacity(int(tier), lone_samples(doc),
                                 gbps_to_bytes_per_s(spec.tier_bandwidth_gbps[int(tier)]),
                                 share))
    factors = capacity_factors(fits)
    predict = tcp_predictor(scenario, factors, shards)
    tcp_fit = fit_tcp([(int(t), d["bytes"], d["seconds"]) for t, r in raw.items()
                       for d in r["samples"]], predict)
    tcp_fit.update(probe_fits(scenario, factors, tcp_fit, {
        str(f.tier): {"overhead_s": f.overhead_s, **raw[str(f.tier)]} for f in fits}, shards))
    compete = competing_residuals(scenario, factors, tcp_fit, raw, shards)
    return {
        "scenario": scenario.name, "scale": scenario.emulation.scale,
        "time_dilation": scenario.emulation.time_dilation, "capacity_factor": factors,
        "payload_share": share,
        "tiers": {str(f.tier): {"factor": f.factor, "fitted_factor": f.fitted,
                                "overhead_s": f.overhead_s, "r2": f.r2, **raw[str(f.tier)]}
                  for f in fits},
        "tcp": {**tcp_fit, "fluid_median_abs_error": fluid_error(scenario, factors, raw)},
        "competing": compete,
    }


def _tier_geometry(scenario, factors: dict[int, float]) -> dict[int, tuple[float, list[float]]]:
    """tier -> (one-way latency s, calibrated hop rates bytes/s) of its paths."""
    spec = scenario.cluster.spec()
    net = FluidNetwork(spec, None, factors)
    lat = spec.tier_latency_us
    return {t: (lat[t] * 1e-6, [net.links[h].capacity for h in spec.paths(a, b)[0]])
            for t, (a, b) in tier_pairs(spec).items()}


def tcp_predictor(scenario, factors: dict[int, float], shards: int):
    """predict(serialisation, hop_delay_s, tier, bytes, competing=1): a transfer's time in
    the TCP flow model with the replica's equivalents; its shards (and any competing
    transfers on the same path) share the tier's bottleneck equally."""
    emu = scenario.emulation
    geometry = _tier_geometry(scenario, factors)

    def predict(share: float, hop_delay_s: float, tier: int, size: float,
                competing: int = 1) -> float:
        params = tcp.emulation_equivalent(emu.scale, emu.time_dilation, hop_delay_s,
                                          scenario.network.tcp.init_cwnd, share, emu.frame_bytes)
        latency, rates = geometry[tier]
        rate = min(rates) / (shards * competing)
        return tcp.lone_transfer_time(size / shards, rate,
                                      tcp.path_rtt(latency, rates, params, size / shards), params)
    return predict


def fluid_predictor(scenario, factors: dict[int, float]):
    """fluid(tier, bytes, competing=1): the transfer's time at its equal share of the
    calibrated bottleneck (its shards split that share; they end together)."""
    geometry = _tier_geometry(scenario, factors)
    return lambda tier, size, competing=1: size * competing / min(geometry[tier][1])


def fluid_error(scenario, factors: dict[int, float], raw: dict) -> float:
    """Median |error| of the fluid model (bytes / calibrated rate) on the lone probes."""
    fluid = fluid_predictor(scenario, factors)
    errs = [abs(fluid(int(t), d["bytes"]) - d["seconds"]) / d["seconds"]
            for t, r in raw.items() for d in r["samples"]]
    return sorted(errs)[len(errs) // 2]


def probe_fabric(scenario, on_step=None) -> dict[str, dict]:
    """The probes on a fabric of `scenario`'s first point built for them and torn down
    after (the benches set the emulation's beside ns-3's): calibrate's "tiers"."""
    import tempfile
    from pathlib import Path

    import yaml

    point_scenario = scenario.points()[0][1]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(point_scenario.model_dump(mode="json"), sort_keys=False))
        with EmulatedNetwork(point_scenario, path, Path(tmp)) as network:
            return calibrate(network, on_step)["tiers"]
