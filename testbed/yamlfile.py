"""Strict YAML for the files users write (scenarios, --set values, inventories).

PyYAML's safe loader still takes a duplicate key silently (the last one wins) and expands
aliases, so a few lines can name gigabytes (a "billion laughs"). Both are refused here,
with the line.
"""

from __future__ import annotations

import yaml


class StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed: write the value out",
                event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports an unhashable key
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load(text: str):
    """Parse YAML text strictly; raises yaml.YAMLError with the line."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
