"""RoCE's record of a run (ns3.json's `roce`), read from the program's `pfc` answer: pure,
so the network class only asks and the reading is tested on its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def roce_facts(lines: Iterable[str], hop_of: Callable[[int, int], tuple[str, str]],
               valleys: int, cycle: list[str]) -> dict:
    """PFC pauses (how many, how long egresses stood paused), the deepest KV queue, CE
    marks, KV packets dropped (a watchdog's only: the class is lossless), each watchdog
    trip by link, CNPs, NAKs, timeouts; `valleys`, the most (switch, destination) routes
    that stepped down and up again at once (after a link fault), and `cycle`, the first
    cycle of dependencies the routes held (where a cycle of pauses can hold: without one
    no pause waits on itself); the egresses still paused at the end."""
    out = {"pauses": 0, "paused_s": 0.0, "max_kv_queue_bytes": 0, "marks": 0,
           "kv_drops": 0, "watchdog_trips": [], "cnps": 0, "naks": 0, "timeouts": 0,
           "valley_routes": valleys, "dependency_cycle": cycle, "paused_at_end": []}
    for line in lines:
        w = line.split()
        if w[0] == "l":
            n = [int(x) for x in w[3:8]]
            if w[10] == "1":  # a pause standing when the run ended
                out["paused_at_end"].append("->".join(hop_of(int(w[1]), int(w[2]))))
            out["pauses"] += n[0]
            out["paused_s"] += n[1] / 1e9
            out["max_kv_queue_bytes"] = max(out["max_kv_queue_bytes"], n[2])
            out["marks"] += n[3]
            out["kv_drops"] += n[4]
        elif w[0] == "w":
            out["watchdog_trips"].append({"egress": "->".join(hop_of(int(w[1]), int(w[2]))),
                                          "at_s": int(w[3]) / 1e9,
                                          "paused_s": int(w[4]) / 1e9})
        elif w[0] == "g":
            out["cnps"], out["naks"], out["timeouts"] = (int(x) for x in w[1:4])
    return out
