"""Commands for the testbed's virtual machines: the local Vagrant box."""

from __future__ import annotations

import time

import click

from testbed.cli.common import _fail, console, handle_signals, main


@main.group()
def vm() -> None:
    """The Vagrant box the Vagrantfile's libvirt provider boots.

    No box can be downloaded here (only package mirrors are reachable), so `testbed vm
    box` builds Debian 12 from Debian packages and adds it to Vagrant as netkv/debian12;
    then `vagrant up` in the checkout gives a VM provisioned by playbooks/testbed.yml.
    """


@vm.command()
@click.option("--rebuild", is_flag=True, help="Build again even when the cached box matches.")
@click.option("--mirror", default=None, metavar="URL",
              help="Debian mirror for debootstrap and the VM's apt sources "
                   "[default: http://deb.debian.org/debian].")
def box(rebuild: bool, mirror: str | None) -> None:
    """Build (once) and add the local Debian 12 box (needs root; about 4 minutes).

    debootstrap bookworm with the kernel, SSH, sudo, the playbook's packages and Ansible;
    extlinux boots it; the `vagrant` user has Vagrant's insecure key (replaced on the
    first `vagrant up`) and passwordless sudo; each VM makes its own SSH host keys at
    first boot. The box is cached in /var/cache/netkv-testbed/box under its recipe's
    hash (packages, mirror, this host's local CA certificates, which the VM trusts too)
    and rebuilt only when the recipe changes. Also measures whether this host's KVM
    boots a Debian kernel: the Vagrantfile uses driver kvm if so, qemu (software
    emulation) otherwise.
    """
    import os

    from testbed.vm import box as boxes

    if os.geteuid() != 0:
        _fail("building the box needs root (debootstrap, loop devices, mounts)")
    handle_signals()  # Ctrl-C or SIGTERM: unmount and detach before exiting
    started = time.monotonic()

    def step(label: str) -> None:
        console.print(f"[{time.monotonic() - started:5.0f} s] {label}", highlight=False)

    recipe = boxes.default_recipe(mirror or boxes.MIRROR)
    try:
        path, built = boxes.ensure(recipe, rebuild=rebuild, on_step=step)
    except boxes.BoxError as exc:
        _fail(str(exc))
    console.print(f"{boxes.BOX_NAME}: {path} ({'built now' if built else 'cached'}, recipe "
                  f"{recipe.digest()}); now `vagrant up`", highlight=False)
