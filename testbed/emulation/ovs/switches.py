"""Mininet's OVSSwitch, bent to this testbed's two ways of running Open vSwitch.

On the system's daemons, a bridge's deletion must not wait for ever on an ovs-vswitchd
that died (Mininet's ovs-vsctl has no time limit). On the run's private daemons, each
bridge lives on one daemon (testbed.topologies.placement), talks to it through its run
directory, and dials the controller's unix socket there. The controller the switches dial
is known to listen before Mininet starts (the run waited for its HTTP status), so
Mininet's own check, which may crash the run, is left out.
"""

from __future__ import annotations

from functools import partial

from testbed.topologies.placement import switch_daemons


def switch_class(datapath: str, daemons: list, switch_names):
    """The Mininet switch class of a fabric: its bridges on the system's Open vSwitch, or
    spread over the run's private daemons."""
    from mininet.node import OVSSwitch
    from mininet.util import errRun

    if not daemons:
        class SystemOVSSwitch(OVSSwitch):
            @classmethod
            def batchShutdown(cls, switches, run=errRun):  # noqa: N802 - Mininet's
                """Bounded: without --timeout, ovs-vsctl waits for ever on an
                ovs-vswitchd that died."""
                return super().batchShutdown(switches, run=lambda cmd: run(
                    cmd.replace("ovs-vsctl ", "ovs-vsctl --timeout=10 ", 1)))

        return partial(SystemOVSSwitch, datapath=datapath, protocols="OpenFlow13")
    placed = switch_daemons(switch_names, len(daemons))
    daemon_of = {name: daemons[k] for name, k in placed.items()}

    class DaemonOVSSwitch(OVSSwitch):
        """A bridge on one of the run's private daemons: the node's shell talks to it
        through OVS_RUNDIR, and it dials the controller's unix socket."""

        def __init__(self, name, **params):
            super().__init__(name, **params)
            self.cmd(f"export OVS_RUNDIR={daemon_of[name].rundir}")

        @staticmethod
        def TCReapply(intf):  # noqa: N802 - Mininet's name; tc is ours, per namespace
            pass

        def start(self, controllers):
            super().start([])
            self.vsctl("set-controller", self, f"unix:{daemon_of[self.name].openflow_socket}")

        @classmethod
        def batchStartup(cls, switches, **_kwargs):  # noqa: N802
            return switches

        @classmethod
        def batchShutdown(cls, switches, **_kwargs):  # noqa: N802 - the daemon's db dies
            return switches  # with it, and its namespace takes the bridges' taps

    return partial(DaemonOVSSwitch, datapath=datapath, protocols="OpenFlow13")


def remote_controller(name: str, ip: str, port: int):
    """Mininet's RemoteController without its listening check. The check runs `echo A |
    telnet -e A ip port` in a node shell: when the controller's OpenFlow HELLO (binary,
    a random transaction id) reaches telnet before the escape character does, telnet
    prints it into the shell and Mininet's UTF-8 reading of the shell fails
    (UnicodeDecodeError), a race a loaded machine loses now and then."""
    from mininet.node import RemoteController

    class ListeningController(RemoteController):
        def checkListening(self):  # noqa: N802 - Mininet's name
            pass

    return ListeningController(name, ip=ip, port=port)
