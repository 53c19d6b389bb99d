"""Open vSwitch for an emulated fabric: the system's daemons or private ones.

switches         Mininet's OVSSwitch, bent to both ways of running Open vSwitch
private_daemons  private daemons, one network namespace each, for a fabric split over cores
system_daemons   the system's daemons watched while a fabric runs on them
"""
