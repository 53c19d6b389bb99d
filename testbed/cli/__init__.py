"""The `testbed` command line, one module per command family: flow (the flow model),
packets (fabric, emulation, calibration, validation), folders (finished runs: judge,
compare, repeat, replay, export-workload), machines (provisioning, remote machines) and
vm (the Vagrant box); common holds the group and the SCENARIO parameter type; options
the shared option types."""

from testbed.cli import flow, folders, machines, packets, vm  # noqa: F401 - registers commands
from testbed.cli.common import main

__all__ = ["main"]
