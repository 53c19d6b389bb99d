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
    size = 200_000
    try:
        wait_for(lambda: recv.stdout.readline().strip() == b"ready", 20, "the receiver")
        send = fabric.host("i0").popen(
            [sys.executable, "-m", "testbed.workers.probe", "calls", dst.IP(), str(port),
             "cubic", str(size), "1", "512"], cwd=ROOT)
        out, err = send.communicate(timeout=120)
        assert send.returncode == 0, err
        landed = [json.loads(recv.stdout.readline()) for _ in range(2)]
    finally:
        recv.terminate()
        recv.wait(timeout=10)
    contiguous, blocks = (json.loads(line) for line in out.decode().splitlines())
    assert [x["bytes"] for x in landed] == [size, size]  # exactly the same bytes
    assert contiguous["calls"] == 1 and blocks["calls"] == 512
    # 511 more round trips: measurably longer (both measured here, side by side)
    assert blocks["seconds"] > 1.5 * contiguous["seconds"], (contiguous, blocks)
