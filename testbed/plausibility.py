"""Physical bounds on a scenario: values that parse and even run, but describe no machine.

A scenario with a 1 EB/s NIC or a GPU that cannot hold one token's KV runs to the end
and reports numbers; nothing in them says they mean nothing. Each bound names the real
limit it stands for, so a user who truly means it knows what to change.
"""

from __future__ import annotations

from testbed.model.kv import kv_bytes_per_token
from testbed.workloads.profiles import PROFILES

# 1.6T Ethernet (IEEE 802.3dj) is the fastest NIC or switch port offered
MAX_PORT_GBPS = 1600.0
# NVLink 5 (Blackwell): 1.8 TB/s per GPU, both directions together
MAX_NVLINK_GBPS = 14_400.0
# an oversubscription closer to 1 than this changes each oversubscribed link's rate by
# less than a rate measurement on the emulated fabric resolves (0.1%)
MIN_OVERSUBSCRIPTION = 1.001
# the packet replica's slowest link below this carries a 1500-byte frame in over 0.12 s,
# more than half of TCP's minimum RTO: no engine on packets builds a replica that runs
MIN_REPLICA_BPS = 100e3


def fabric_problems(host_gbps: float, nvlink_gbps: float, tor_over: float,
                    core_over: float) -> list[str]:
    """What in the fabric's rates no hardware offers, one named field per line."""
    out = []
    if host_gbps > MAX_PORT_GBPS:
        out.append(f"cluster.host_gbps: {host_gbps:g} Gbit/s is above any NIC or switch port "
                   f"on offer ({MAX_PORT_GBPS:g}, 1.6T Ethernet)")
    if nvlink_gbps > MAX_NVLINK_GBPS:
        out.append(f"cluster.nvlink_gbps: {nvlink_gbps:g} Gbit/s is above any GPU "
                   f"interconnect ({MAX_NVLINK_GBPS:g}, NVLink 5's 1.8 TB/s)")
    for name, x in (("tor_oversubscription", tor_over), ("core_oversubscription", core_over)):
        if 1.0 < x < MIN_OVERSUBSCRIPTION:
            out.append(f"cluster.{name}: {x:.12g} changes no link measurably (its links run "
                       f"{100 * (1 - 1 / x):.2g}% below the host rate); give 1 for none, or "
                       f"at least {MIN_OVERSUBSCRIPTION:g}")
    return out


def replica_problems(host_gbps: float, tor_over: float, core_over: float,
                     scale: float) -> list[str]:
    """Whether the packet replica (every rate times emulation.scale) can carry a frame."""
    slowest = min(host_gbps, host_gbps / tor_over, host_gbps / core_over) * 1e9 * scale
    if slowest >= MIN_REPLICA_BPS:
        return []
    return [f"emulation.scale: {scale:g} makes the replica's slowest link {slowest:.3g} "
            f"bit/s, below {MIN_REPLICA_BPS / 1e3:g} kbit/s (a 1500-byte frame would take "
            f"{12e3 / max(slowest, 1e-300):.3g} s): no packet engine could run it; raise "
            f"emulation.scale to {MIN_REPLICA_BPS / slowest * scale:.2g} at least"]


def memory_problems(kv_per_token: float, memory_bytes: float, reserve_bytes: float,
                    min_tokens: int) -> list[str]:
    """Whether an instance's KV memory (less the reserve the schedulers keep free) can hold
    one token, and the smallest request this workload can make."""
    usable = memory_bytes - reserve_bytes
    if kv_per_token > memory_bytes:
        return [f"the KV of one token ({kv_per_token:,.0f} bytes for this model) exceeds an "
                f"instance's KV memory (cluster.memory_gb {memory_bytes / 1e9:g} GB): no "
                "request could be served; check cluster.memory_gb and the model's n_layers "
                "x n_kv_heads x d_head"]
    need = kv_per_token * min_tokens
    if usable < need:
        return [f"cluster.memory_gb: {memory_bytes / 1e9:g} GB less memory_reserve_gb "
                f"{reserve_bytes / 1e9:g} leaves {max(usable, 0) / 1e9:.3g} GB, below the KV "
                f"of this workload's smallest request ({min_tokens:,} tokens = "
                f"{need / 1e9:.3g} GB): every request would be rejected"]
    return []


def scenario_problems(scenario) -> list[str]:
    """Every bound a validated scenario breaks (fabric rates, memory for its model and
    its workload's smallest request), one named field per line."""
    c, w = scenario.cluster, scenario.workload
    smallest = w.input_length or PROFILES[w.profile].min_input or 1
    return (fabric_problems(c.host_gbps, c.nvlink_gbps, c.tor_oversubscription,
                            c.core_oversubscription)
            + replica_problems(c.host_gbps, c.tor_oversubscription, c.core_oversubscription,
                               scenario.emulation.scale)
            + memory_problems(kv_bytes_per_token(scenario.model_spec()), c.memory_gb * 1e9,
                              c.memory_reserve_gb * 1e9, smallest))
