"""Transfer granularity on packets (issue 8): the same KV bytes as one contiguous send or
as many framed, acknowledged calls land byte for byte, and the calls cost time."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import ROOT
from tests.emulation.conftest import wait_for

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_block_wise_calls_deliver_the_same_bytes_and_take_longer(fabric):
    port = 7311
    dst = fabric.host("i4")
    recv = dst.popen([sys.executable, "-m", "testbed.workers.probe", "recv", dst.IP(),
                      str(port)], cwd=ROOT)
    # small enough that the calls' round trips, not the link's rate, set the time
    size, calls = 20_000, 1000
    try:
        wait_for(lambda: recv.stdout.readline().strip() == b"ready", 20, "the receiver")
        send = fabric.host("i0").popen(
            [sys.executable, "-m", "testbed.workers.probe", "calls", dst.IP(), str(port),
             "cubic", str(size), "1", "1", str(calls)], cwd=ROOT)
        out, err = send.communicate(timeout=120)
        assert send.returncode == 0, err
        landed = [json.loads(recv.stdout.readline()) for _ in range(3)]
    finally:
        recv.terminate()
        recv.wait(timeout=10)
    # the first shard only warms the path: its connect pays the controller's flow setup,
    # which would otherwise be charged to the contiguous send alone
    _, contiguous, blocks = (json.loads(line) for line in out.decode().splitlines())
    assert [x["bytes"] for x in landed] == [size] * 3  # exactly the same bytes
    assert contiguous["calls"] == 1 and blocks["calls"] == calls
    # 999 more round trips: measurably longer (both measured here, side by side)
    assert blocks["seconds"] > 3 * contiguous["seconds"], (contiguous, blocks)
