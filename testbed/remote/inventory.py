"""Ansible-style YAML inventories: the one list of machines for provisioning and SSH.

    all:
      vars: {ansible_user: debian, netkv_known_hosts: ~/.ssh/known_hosts}
      hosts:
        node1: {ansible_host: 192.0.2.10}
        node2: {ansible_host: 192.0.2.11, ansible_port: 2222,
                ansible_ssh_private_key_file: ~/.ssh/testbed}

Hosts may also sit in `children` groups; group vars apply to their hosts, host vars win.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed import yamlfile
from testbed.remote.ssh import HostSpec

# Where `testbed provision` puts the project on a server unless its `netkv_project_dir`
# says otherwise; every command that runs something there reads it through project_dir.
DEFAULT_PROJECT_DIR = "/opt/netkv-testbed"


class InventoryError(ValueError):
    pass


def project_dir(hostvars: dict) -> str:
    """The project's folder on a server, from its inventory variables."""
    return str(hostvars.get("netkv_project_dir", DEFAULT_PROJECT_DIR))


def _walk(group: dict, inherited: dict, out: dict[str, dict], where: str) -> None:
    if not isinstance(group, dict):
        raise InventoryError(f"{where}: expected a mapping")
    vars_ = {**inherited, **(group.get("vars") or {})}
    for name, hvars in (group.get("hosts") or {}).items():
        out[name] = {**out.get(name, {}), **vars_, **(hvars or {})}
    for child, sub in (group.get("children") or {}).items():
        _walk(sub or {}, vars_, out, f"{where}.children.{child}")


def load_hostvars(path: str | Path) -> dict[str, dict]:
    """Every host's variables, group vars applied (host vars win)."""
    path = Path(path)
    if not path.is_file():
        raise InventoryError(f"{path}: inventory not found")
    try:
        data = yamlfile.load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise InventoryError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or "all" not in data:
        raise InventoryError(f"{path}: expected a YAML inventory with a top-level 'all' group")
    hosts: dict[str, dict] = {}
    _walk(data["all"], {}, hosts, f"{path}: all")
    if not hosts:
        raise InventoryError(f"{path}: no hosts")
    return hosts


def load_inventory(path: str | Path) -> dict[str, HostSpec]:
    hosts = load_hostvars(path)
    out = {}
    for name, v in hosts.items():
        try:
            port = int(v.get("ansible_port", 22))
        except (TypeError, ValueError):
            raise InventoryError(f"{path}: host {name}: ansible_port must be a number") from None
        key = v.get("ansible_ssh_private_key_file")
        known = v.get("netkv_known_hosts")
        out[name] = HostSpec(
            name=name, host=str(v.get("ansible_host", name)), port=port,
            user=v.get("ansible_user"),
            key_file=str(Path(key).expanduser()) if key else None,
            known_hosts=str(Path(known).expanduser()) if known else None)
    return out


def is_local(name: str, hostvars: dict) -> bool:
    """This machine: an inventory host named localhost or with ansible_connection local."""
    return name == "localhost" or hostvars.get("ansible_connection") == "local"


def host_of(path: str | Path, name: str) -> HostSpec:
    hosts = load_inventory(path)
    if name not in hosts:
        raise InventoryError(f"{path}: no host {name!r}; hosts: {', '.join(sorted(hosts))}")
    return hosts[name]
