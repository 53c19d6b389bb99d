"""The Mininet topology, built from the Fabric (itself derived from the FatTreeSpec)."""

from __future__ import annotations

from mininet.topo import Topo

from testbed.topologies.fabric import Fabric


class FatTreeTopo(Topo):
    """Hosts are instances, switches are ToR/aggregation/core; ports as the Fabric numbers them.

    Links carry no tc parameters: testbed.datapath.tc owns every qdisc.
    """

    def build(self, fabric: Fabric) -> None:  # noqa: D401 - Mininet's hook
        for name, dpid in fabric.switches.items():
            self.addSwitch(name, dpid=dpid, protocols="OpenFlow13")
        for host in fabric.hosts.values():
            self.addHost(host.name, ip=f"{host.ip}/16", mac=host.mac)
        for link in fabric.links:
            kwargs = {}
            if link.a in fabric.switches:
                kwargs["port1"] = link.port_a
            if link.b in fabric.switches:
                kwargs["port2"] = link.port_b
            self.addLink(link.a, link.b, **kwargs)
