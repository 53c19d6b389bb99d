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
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run finally blocks, then exit
    if args.role == "router":
        from testbed.workers.router import main as router_main

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
    return cls(cfg, args.instance or "loadgen").run()


if __name__ == "__main__":
    sys.exit(main())
