"""The router's view of the network: the oracle fetched from the controller on its
period, its age, the live view written for `emulate`'s console, and the transfer
intents posted back to the controller."""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from testbed.model.oracle import Oracle


def fetch_oracle(url: str, timeout: float = 2.0) -> Oracle:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return Oracle.from_dict(json.loads(resp.read()))


def first_oracle(url: str, within_s: float = 30.0) -> Oracle:
    """The router's first oracle, asked again until `within_s` has passed: a controller
    on a loaded or software-emulated machine can take longer than one fetch's timeout to
    answer its first request. The last error is raised, with how often it was tried."""
    deadline, tries = time.monotonic() + within_s, 0
    while True:
        tries += 1
        try:
            return fetch_oracle(url)
        except urllib.error.HTTPError:
            raise  # it answered: asking again gets the same answer
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise OSError(f"{exc} ({tries} tries in {within_s:.0f} s)") from exc
        time.sleep(0.5)


class OracleFeed:
    """Router's oracle fetches, live view and intents."""

    # -- oracle and intents (their own threads; decisions read self.latest_oracle) -----------
    def _refresh_oracle(self) -> None:
        period = self.loop.clock.spans.wall(self.scenario.oracle.refresh_s)
        while not self._stop.wait(period):
            try:
                self.latest_oracle = fetch_oracle(self.cfg.oracle_url + "/oracle")
                self.oracle_fetches += 1
            except (OSError, ValueError):
                self.oracle_errors += 1  # keep deciding on the last oracle: it only ages
            self._write_live()

    def _write_live(self) -> None:
        """live.json: what `testbed emulate` shows beside its progress bar (the oracle this
        router decides on, its transfers in flight); best effort, never in the way."""
        try:
            states = list(self.states.values())
        except RuntimeError:  # the loop thread added a request meanwhile: next period
            return
        doc = {"congestion": {str(k): v for k, v in self.latest_oracle.congestion.items()},
               "in_flight": self.plane.in_flight(), "arrived": len(states),
               "ended": sum(rs.state is not None for rs in states), "expected": self.expected}
        path = Path(self.cfg.out) / "live.json"
        with contextlib.suppress(OSError):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)

    def _post_intents(self) -> None:
        while (intent := self.intents.get()) is not None:
            headers = {"Content-Type": "application/json"}
            if self.scenario.emulation.token:
                headers["Authorization"] = f"Bearer {self.scenario.emulation.token}"
            req = urllib.request.Request(self.cfg.oracle_url + "/intent",
                                         data=json.dumps(intent.to_dict()).encode(),
                                         headers=headers)
            try:
                urllib.request.urlopen(req, timeout=2.0).close()
                self.intents_posted += 1
            except OSError:
                pass

    def _oracle_age(self) -> float:
        age = self.loop.clock.span(time.time() - self.latest_oracle.generated_at)
        self.faults.note_oracle_age(age)
        return age

    def oracle_fresh(self) -> bool:
        return self._oracle_age() <= self.scenario.recovery.oracle_max_age_s

    def oracle(self) -> Oracle:
        """The last oracle as the control plane lets a decision use it; under FlowKV roles
        switch, so it also knows every instance pair's tier."""
        oracle = self.plane.view(self.latest_oracle, self._oracle_age())
        if self.flowkv is not None:
            oracle = oracle.with_tiers(self.flowkv.all_tiers)
        return oracle
