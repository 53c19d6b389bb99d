"""Virtual machines for real: the local box, `vagrant up` with libvirt, tests inside them.

Part of ./run.sh test (about 25 minutes here: two software-emulated VMs); NETKV_VM_TESTS=0
leaves them out with that reason. Needs root, libvirt with QEMU and vagrant-libvirt
(./run.sh setup installs them). A developer without them sees every test here skipped
with the reason; under CI (CI=true) a missing prerequisite fails instead. The box is
built once per machine (cached under /var/cache/netkv-testbed/box); VMs and networks are
destroyed when the module ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.vm import box as boxes
from tests.conftest import skip_or_fail_without

HERE = Path(__file__).parent


def missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "needs root (libvirt, loop devices for the box)"
    for tool in ("vagrant", "virsh", "qemu-system-x86_64", "debootstrap", "extlinux"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (./run.sh setup installs the VM tools)"
    plugins = subprocess.run(["vagrant", "plugin", "list"], capture_output=True, text=True)
    if "vagrant-libvirt" not in plugins.stdout:
        return "vagrant-libvirt is not installed (./run.sh setup installs it)"
    if subprocess.run(["virsh", "--connect", "qemu:///system", "version"],
                      capture_output=True).returncode != 0:
        return "libvirtd does not answer (./run.sh setup starts it)"
    return None


OPTED_OUT = "NETKV_VM_TESTS=0 leaves out the VM tests (about 25 minutes here)"


def pytest_collection_modifyitems(config, items):
    wanted = os.environ.get("NETKV_VM_TESTS", "1") != "0"
    skip_or_fail_without(items, HERE, "vm test", missing_prerequisite() if wanted else OPTED_OUT,
                         fail_under_ci=wanted)


@pytest.fixture(scope="session")
def vm_box():
    """The local box in Vagrant: built when absent (about 4 minutes), cached otherwise."""
    path, built = boxes.ensure(on_step=lambda s: print(f"box: {s}", flush=True))
    return path
