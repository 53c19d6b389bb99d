"""`python -m testbed.workers ROLE CONFIG [INSTANCE]`: one worker process of an emulated run.

The orchestrator (testbed emulate) starts these: the router and the load generator in the
root namespace, one prefill or decode worker inside each emulated host.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.workers", description=__doc__)
    parser.add_argument("role", choices=["router", "loadgen", "prefill", "decode"])
    parser.add_argument("config", help="the run's worker config (JSON, written by emulate)")
    parser.add_argument("instance", nargs="?", default=None, help="instance name (i0, ...)")
    parser.add_argument("--netns", metavar="PATH", help="connect to the router first, then "
                        "enter this network namespace (a run over several machines: the "
                        "control connection stays on the management network)")
    parser.add_argument("--exit-on-eof", action="store_true", help="stop when standard input "
                        "closes (started over SSH: the session's end is the parent's death)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run finally blocks, then exit
    if args.exit_on_eof:
        import os
        import threading

        def watch() -> None:
            # the raw descriptor, not sys.stdin: a daemon thread blocked in a buffered
            # read holds its lock, and the interpreter's exit after a normal end of the
            # run then aborts (exit 255, "could not acquire lock for <stdin>")
            while os.read(0, 4096):
                pass
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True, name="stdin-eof").start()
    if args.role == "router":
        from testbed.workers.router.service import main as router_main

        return router_main(args.config)
    from testbed.workers.config import RunConfig

    cfg = RunConfig.load(Path(args.config))
    if args.role == "loadgen":
        from testbed.workers.loadgen import LoadGenerator as cls
    elif args.role == "prefill":
        from testbed.workers.prefill import PrefillWorker as cls
    else:
        from testbed.workers.decode import DecodeWorker as cls
    if args.role in ("prefill", "decode") and not args.instance:
        parser.error(f"{args.role} needs an INSTANCE name")
    conn = None
    if args.netns:
        from testbed.datapath.tc import enter_namespace
        from testbed.workers.channel import connect

        conn = connect(cfg.router_socket, args.instance or "loadgen")
        enter_namespace(args.netns)
    worker = cls(cfg, args.instance or "loadgen")
    worker.conn = conn
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
