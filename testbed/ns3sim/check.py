"""What the ns-3 engine refuses before anything runs: a scenario field the emulation
honours that ns-3 does not model, named, rather than ignored."""

from __future__ import annotations

from testbed.scenario import ScenarioError


def check_scenario(scenario) -> None:
    """Raise ScenarioError naming the first field of any sweep point ns-3 cannot honour."""
    for point, point_scenario in scenario.points():
        where = f"{scenario.name}: " + (f"sweep point {point}: " if point else "")
        if point_scenario.emulation.capture:
            raise ScenarioError(f"{where}emulation.capture: the ns-3 engine records no "
                                "packet captures (the emulation does: testbed emulate "
                                "--capture); remove the field for --engine ns3")
