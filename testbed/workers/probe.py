"""Calibration probe: lone KV transfers between two emulated hosts, timed end to end.

`python -m testbed.workers.probe recv IP PORT` accepts KV streams until terminated;
`python -m testbed.workers.probe send HOST PORT SHARDS CC BYTES [BYTES ...]` sends one
transfer per BYTES (wire bytes, split over SHARDS parallel AF41 streams), one after the
other, and prints a JSON line per transfer: wire bytes and seconds from the first
connect to the last acknowledgement, exactly what an emulated KV transfer measures.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time

from testbed.workers.kvstream import KVReceiver, send_transfer


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "recv":
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        receiver = KVReceiver(argv[1], int(argv[2]), lambda _r: None).start()
        print("ready", flush=True)
        stop.wait()
        receiver.close()
        return 0
    if len(argv) >= 6 and argv[0] == "send":
        host, port, shards, cc = argv[1], int(argv[2]), int(argv[3]), argv[4]
        for k, total in enumerate(int(b) for b in argv[5:]):
            sizes = [total // shards + (1 if i < total % shards else 0) for i in range(shards)]
            t0 = time.time()
            results = send_transfer(host, port, f"probe{k}", sizes, congestion=cc)
            print(json.dumps({"bytes": total, "seconds": max(r.end for r in results) - t0}),
                  flush=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
