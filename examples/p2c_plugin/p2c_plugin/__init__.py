"""Power of two choices on predicted TTFT, as a netkv-testbed scheduler plugin.

Two feasible decode instances are drawn at random and the request goes to the one with
the smaller predicted time to first token after prefill: T_transfer (the oracle's tier
bandwidth, live congestion and this scheduler's own transfers in flight) + T_queue +
T_decode. Sampling two instead of ranking all keeps a decision O(1) in the cluster's
size and spreads load without herding (Mitzenmacher's "power of two choices").
"""

from testbed import Scheduler


class PowerOfTwo(Scheduler):
    name = "P2C"

    def rank(self, request, prefill, feasible, oracle):
        picks = [feasible[i] for i in self.rng.sample(range(len(feasible)), min(2, len(feasible)))]
        costs = [float(self.network_time(request, prefill, c, oracle) + self.load_time(c))
                 for c in picks]
        best = min(range(len(picks)), key=costs.__getitem__)
        return picks[best], costs[best]
