"""What an emulated run leaves: when it is done (every request ended, or the drain
limit), and its result (requests, transfers, counters, the byte ledger) for
router.json."""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.lifecycle import request_row


@dataclass
class Ledger:
    """Byte and message bookkeeping the run checks at the end."""

    wire_sent: dict[str, int] = field(default_factory=dict)
    wire_received: dict[str, int] = field(default_factory=dict)
    wire_expected: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0


class RunRecords:
    """Router's end of run and result."""

    def _drain_limit(self) -> None:
        for rs in self.states.values():
            if rs.state is None:
                self._fail(rs, f"not finished {self.scenario.drain_s:g} s after the last arrival "
                               "(drain limit)")
        self._check_done()

    def _check_done(self) -> None:
        if self.finished or self.expected is None:
            return
        if len(self.states) >= self.expected and all(rs.state for rs in self.states.values()):
            self.finished = True
            self.outcome = "finished"
            self._broadcast({"type": "stop"})
            self.loop.stop()

    def result(self) -> dict:
        mismatched = {rid: (self.ledger.wire_sent.get(rid), self.ledger.wire_received.get(rid))
                      for rid in self.ledger.wire_received
                      if self.ledger.wire_sent.get(rid) != self.ledger.wire_received[rid]}
        return {
            "outcome": self.outcome, "scheduler": self.cfg.scheduler, "seed": self.cfg.seed,
            "t0": self.t0, "expected": self.expected,
            "requests": [request_row(rs, self.slo(rs.req.request_id))
                         for rs in self.states.values()],
            "transfers": sorted(self.transfers, key=lambda t: (t["start"], t["request"],
                                                               t["shard"])),
            "decision_us": self.plane.decision_us,
            "wire_bytes_sent": sum(self.ledger.wire_sent.values()),
            "wire_bytes_received": sum(self.ledger.wire_received.values()),
            "wire_bytes_expected": sum(self.ledger.wire_expected.values()),
            "wire_mismatches": mismatched,
            "oracle_fetches": self.oracle_fetches, "oracle_errors": self.oracle_errors,
            "intents_posted": self.intents_posted,
            "duplicates": self.ledger.duplicates, "errors": self.ledger.errors,
            "oracle_age_max_s": self.faults.max_age, "faults": self.faults.log,
            "clock_offsets_s": self.clock_offsets, "clock_rtt_s": self.clock_rtt,
            "counters": self.plane.counters(
                faults_injected=sum(f["event"] != "declared dead" for f in self.faults.log),
                level_bytes=self.level_bytes, reuse_bytes=self.reuse_bytes,
                prefill_stall_s=sum(self.stall_s.values()), pruned_requests=len(self.pruned),
                roles=self.flowkv),
        }
