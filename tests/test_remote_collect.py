"""`remote collect` writes only inside its target folder, whatever the server lists."""

from __future__ import annotations

import stat
from types import SimpleNamespace

import pytest

from testbed.remote.ssh import HostSpec, RemoteError, RemoteHost, confined


class FakeSftp:
    """A server whose listing is hostile: names are whatever it says."""

    def __init__(self, tree: dict):
        self.tree = tree

    def _node(self, path: str):
        node = self.tree
        for part in [p for p in path.split("/") if p]:
            node = node[part]
        return node

    def listdir_attr(self, path: str):
        return [SimpleNamespace(filename=name, st_mode=(stat.S_IFDIR if isinstance(v, dict)
                                                        else stat.S_IFREG))
                for name, v in self._node(path).items()]

    def get(self, remote: str, local: str):
        with open(local, "w") as fh:
            fh.write(self._node(remote))

    def close(self):
        pass


def host_with(tree: dict) -> RemoteHost:
    host = RemoteHost(HostSpec(name="h", host="127.0.0.1"))
    host.client = SimpleNamespace(open_sftp=lambda: FakeSftp(tree))
    return host


def test_a_normal_folder_is_copied(tmp_path):
    n = host_with({"run": {"a.csv": "1", "cells": {"b.json": "2"}}}).collect("/run",
                                                                             tmp_path / "t")
    assert n == 2 and (tmp_path / "t" / "cells" / "b.json").read_text() == "2"


@pytest.mark.parametrize("name", ["../escape", "../../x", "/etc/passwd", "..", ".", "a/b",
                                  ""])
def test_hostile_names_are_refused_and_nothing_lands_outside(tmp_path, name):
    tree = {"run": {"ok.csv": "1", name: "evil"}}
    with pytest.raises(RemoteError, match="refusing remote file name"):
        host_with(tree).collect("/run", tmp_path / "t")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "x").exists()
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and "t" not in p.parts]
    assert outside == []


def test_a_symlinked_target_cannot_lead_outside(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "link").symlink_to(tmp_path)  # planted before the collect
    with pytest.raises(RemoteError, match="leads outside"):
        confined((tmp_path / "t").resolve(), tmp_path / "t", "link")
