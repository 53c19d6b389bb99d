"""FlowKV-LA role switching at the control plane, the same for both engines.

Every flowkv.cycle_s the engine samples each node's state (the flow simulator reads its
instances, the router the workers' reports: that is the engine's part) and hands it to
`RoleSwitching.cycle`, which runs the model's controller (testbed.model.flowkv: smooth,
score, plan, switch) and applies its switches:

- a decode node switched to prefill work gets a prefill queue (the engine's `hybrid`)
  and takes prefill work while accepting; a request it prefills is decoded there when it
  has the memory (the control plane's local decision);
- a prefill node switched to decode work becomes a decode candidate (the engine gives it
  a decode engine); when it returns it takes no new decode work and finishes its batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from testbed.model import flowkv


class RoleEngine(Protocol):
    def hybrid(self, name: str):
        """A prefill queue for decode node `name` (a serving.PrefillInstance)."""

    def to_decode(self, name: str) -> None:
        """Prefill node `name` starts decode work (a decode engine, reports, heartbeats)."""

    def role(self, name: str, role: str) -> None:
        """Tell node `name` its role is now `role` (prefill | decode); a no-op where the
        engine has nobody to tell."""


class RoleCycle:
    """An engine's side of role switching, the part both engines share: build the
    switching, run its cycle every flowkv.cycle_s on the engine's loop, choose prefill
    nodes, sample every node the same way. A subclass gives its readings (what the
    engine knows of its requests and nodes) and acts on switches (RoleEngine)."""

    def __init__(self, cfg, loop, prefill: Mapping, decode: Mapping):
        """`prefill`, `decode`: the engine's live maps of prefill queues and decode
        instances (or the router's views of them); a switch adds to them in place."""
        self.cfg, self.loop, self.prefill, self.decode = cfg, loop, prefill, decode
        self.roles = RoleSwitching(cfg, prefill, cfg.controller(prefill, decode))

    def start(self) -> None:
        self.loop.after(self.cfg.cycle_s, self.cycle)

    def choose_prefill(self, tokens: int, now: float):
        return self.roles.choose_prefill(self.prefill, tokens, now)

    def sample(self) -> tuple[dict, list[str]] | None:
        """(node -> sampled state, live decode nodes) now; None ends the cycle."""
        states = self.request_states()
        if states is None:
            return None
        sending = sending_counts(states)
        samples = {}
        for name in self.prefill:
            busy, queued, queued_tokens = self.prefill_reading(name)
            samples[name] = flowkv.prefill_node_state(busy, queued, sending[name],
                                                      queued_tokens, self.cfg.token_budget)
        live = self.live_decoders()
        for name in live:
            samples[name] = flowkv.decode_node_state(*self.decode_reading(name))
        return samples, live

    # -- the engine's readings -----------------------------------------------------------
    def request_states(self) -> Iterable | None:
        """The open requests' states (transfer_start/end, prefill, state); None once the
        engine is finished, which ends the cycle."""
        raise NotImplementedError

    def prefill_reading(self, name: str) -> tuple[bool, int, int]:
        """Prefill node `name`: (busy, requests queued behind the running one, tokens
        queued)."""
        raise NotImplementedError

    def live_decoders(self) -> list[str]:
        """The decode nodes alive now."""
        raise NotImplementedError

    def decode_reading(self, name: str) -> tuple[int, int, int, float, float]:
        """Decode node `name`: (batch size, beta_max, requests queued, free memory bytes,
        memory capacity bytes)."""
        raise NotImplementedError

    def cycle(self) -> None:
        sampled = self.sample()
        if sampled is None:
            return
        samples, live = sampled
        self.roles.cycle(self.loop.now, samples, live, self)
        self.loop.after(self.cfg.cycle_s, self.cycle)

    def closed_decoders(self) -> set[str]:
        return self.roles.closed_decoders(self.decode)

    def counters(self) -> dict:
        return self.roles.counters()


class RoleSwitching:
    def __init__(self, cfg, prefill_pool: Iterable[str], controller: flowkv.Controller):
        self.cfg = cfg
        self.prefill_pool = set(prefill_pool)
        self.control = controller
        self.hybrid: dict = {}  # decode node -> its prefill queue
        self.accepting: set[str] = set()  # switched decode nodes taking prefill work
        self.decoding: set[str] = set()  # switched prefill nodes taking decode work

    def choose_prefill(self, prefill: Mapping, tokens: int, now: float):
        """The node with the smallest expected TTFT: the prefill instances and the decode
        nodes accepting prefill work (their queues and their own compute)."""
        targets = [*prefill.values(), *(self.hybrid[n] for n in sorted(self.accepting))]
        return flowkv.fastest_prefill(targets, tokens, now)

    def cycle(self, now: float, samples: Mapping, live_decode: list[str],
              engine: RoleEngine) -> None:
        """One controller cycle over `samples` (node -> NodeState); `live_decode` are the
        decode-pool nodes still alive."""
        new, back = self.control.step(now, samples, live_decode,
                                      [*live_decode, *sorted(self.prefill_pool)])
        for name in new:
            if name in self.prefill_pool:  # prefill -> decode work
                engine.to_decode(name)
                self.decoding.add(name)
                engine.role(name, "decode")
                continue
            if name not in self.hybrid:
                self.hybrid[name] = engine.hybrid(name)
            self.accepting.add(name)
            engine.role(name, "prefill")
        for name in back:
            if name in self.prefill_pool:
                self.decoding.discard(name)
            else:
                self.accepting.discard(name)
            engine.role(name, "prefill" if name in self.prefill_pool else "decode")
        self.accepting &= set(live_decode)

    def closed_decoders(self, decode_capable: Iterable[str]) -> set[str]:
        """Prefill nodes with a decode engine that take no decode work now."""
        return {n for n in decode_capable if n in self.prefill_pool} - self.decoding

    def counters(self) -> dict:
        return self.control.counters()


def sending_counts(states: Iterable) -> Counter:
    """Per prefill instance: the transfers it is sending now (open requests whose KV has
    left and not landed)."""
    return Counter(rs.prefill for rs in states
                   if rs.transfer_start is not None and rs.transfer_end is None
                   and rs.state is None)
