"""Inference timing model: t_iter(beta) = a + b*beta and T_prefill(l) = c*l + d.

Default constants (Llama-3-70B, TP=4 on H100, FP16). The paper fits these to DistServe,
vLLM v0.6 and MLPerf v5.0 but does not print the constants, so we derive them:

- iter_base_s (a) = 12.0 ms: one decode step reads 35 GB of weights per GPU at
  ~3.35 TB/s HBM (10.4 ms) plus TP all-reduce and launch overhead.
- iter_per_seq_s (b) = 0.02 ms per sequence in the batch: chosen so that
  t_iter over the batch sizes of the paper's runs (beta ~ 20-60) lands in its reported
  TBT band of 12.55-13.42 ms.
- prefill_per_token_s (c) = 60 us/token: ~140 GFLOP/token on 4 H100 at ~60% MFU.
- prefill_base_s (d) = 20 ms: fixed launch and scheduling overhead.

Every constant is a scenario field (`timing:`), so a user with a profile overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimingModel:
    iter_base_s: float = 0.012
    iter_per_seq_s: float = 0.00002
    prefill_per_token_s: float = 0.00006
    prefill_base_s: float = 0.020

    def iteration_time(self, batch: int) -> float:
        """t_iter(beta) = a + b*beta: one continuous-batching decode step."""
        if (batch.min() if isinstance(batch, np.ndarray) else batch) < 0:
            raise ValueError(f"batch must be >= 0, got {batch}")
        return self.iter_base_s + self.iter_per_seq_s * batch

    def prefill_time(self, tokens: int) -> float:
        """T_prefill(l) = c*l + d."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return self.prefill_per_token_s * tokens + self.prefill_base_s


def prefill_capacity_rps(timing: TimingModel, input_lengths: list[int], n_prefill: int) -> float:
    """Requests/s the prefill pool sustains at 100% busy: what "100% load" means here.

    The paper calibrates load per workload without printing the rule; we take the
    prefill pool's mean service rate for the workload's own length mix.
    """
    if not input_lengths:
        raise ValueError("no requests to calibrate capacity from")
    mean = sum(timing.prefill_time(n) for n in input_lengths) / len(input_lengths)
    return n_prefill / mean
