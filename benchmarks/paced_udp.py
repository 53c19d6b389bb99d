"""Paced UDP: 1400-byte datagrams to DST at RATE bit/s for SECONDS (a full queue drops the
excess). The load of the shaped-link benchmarks and tests, run inside a namespace.

Run: python benchmarks/paced_udp.py RATE SECONDS DST
"""

import contextlib
import socket
import sys
import time


def main(rate: float, seconds: float, dst: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    gap, end, due = 1400 * 8 / rate, time.monotonic() + seconds, time.monotonic()
    while time.monotonic() < end:
        with contextlib.suppress(OSError):  # a full queue: the qdisc dropped it
            s.sendto(bytes(1400), (dst, 9))
        due += gap
        time.sleep(max(0.0, due - time.monotonic()))


if __name__ == "__main__":
    main(float(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
