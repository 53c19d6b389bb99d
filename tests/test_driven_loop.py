"""The event loop beside a network with its own clock (flowsim.events.DrivenLoop): what
finishes in the network between two events is handled at its own instant, in order."""

from testbed.flowsim.events import DrivenLoop


def test_network_ends_come_between_events_at_their_own_instants():
    ends = [0.5, 0.5, 2.5]  # what the network will finish, and when
    seen = []
    loop = DrivenLoop()

    def run_until(t):
        return ends.pop(0) if ends and ends[0] <= t else None

    loop.run_until = run_until
    loop.on_network = lambda: seen.append(("net", loop.now))
    for t in (0.2, 1.0, 3.0):
        loop.at(t, lambda t=t: seen.append(("event", loop.now)))
    loop.run(until=10.0)
    assert seen == [("event", 0.2), ("net", 0.5), ("net", 0.5), ("event", 1.0),
                    ("net", 2.5), ("event", 3.0)]
    assert loop.now == 10.0 and loop.processed == 6


def test_the_network_runs_to_the_horizon_with_no_event_left_and_stop_is_honoured():
    loop = DrivenLoop()
    asked = []
    loop.run_until = lambda t: asked.append(t) or None
    loop.run(until=4.0)
    assert asked == [4.0] and loop.now == 4.0
    stopped = DrivenLoop()
    stopped.at(1.0, lambda: None)
    stopped.run(until=4.0, stop=lambda: True)
    assert stopped.now == 0.0 and stopped.pending == 1
