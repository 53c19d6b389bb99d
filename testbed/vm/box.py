"""The local Vagrant box: Debian 12 built here from Debian packages, because no box can be
downloaded (only the package mirrors are reachable).

debootstrap into an ext4 partition of a raw image (attached at its 1 MiB offset: the host
kernel may lack loop partition support), extlinux as the boot loader, the `vagrant` user
with Vagrant's insecure key and passwordless sudo, the packages the playbook installs
(so provisioning inside a software-emulated VM mostly finds them present), then a
compressed qcow2 packaged for vagrant-libvirt. The recipe's hash names the cached box, so
the same recipe is built once per machine and a changed recipe is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BOX_NAME = "netkv/debian12"
CACHE = Path("/var/cache/netkv-testbed/box")
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
DISK_GIB = 12
OFFSET = 1 << 20  # the one partition starts at 1 MiB

# Booting and reaching the VM: kernel, init, network, SSH, sudo, Vagrant's rsync folder.
BASE_PACKAGES = [
    "linux-image-amd64", "systemd-sysv", "udev", "kmod", "openssh-server", "sudo",
    "ifupdown", "isc-dhcp-client", "iproute2", "ca-certificates", "rsync", "less",
]
# What playbooks/testbed.yml installs (packages, openvswitch, prometheus roles), and
# Ansible for Vagrant's ansible_local provisioner.
PLAYBOOK_PACKAGES = [
    "python3", "python3-venv", "python3-pip", "mininet", "openvswitch-switch", "iperf3",
    "ethtool", "tcpdump", "iputils-ping", "procps", "openssh-client", "prometheus",
    "ansible", "python3-apt", "git", "g++", "libibverbs1", "libnuma1", "libcurl4",
]
RECIPE_VERSION = 4  # bump when the steps below change what the box contains
PROJECT = Path(__file__).resolve().parents[2]  # the checkout whose venv the box carries
VENV_HOME = "/vagrant"  # where the Vagrantfile puts the project in the VM


class BoxError(RuntimeError):
    """A step of the build failed: names the step and the command's last output."""


@dataclass(frozen=True)
class Recipe:
    mirror: str = MIRROR
    suite: str = SUITE
    packages: tuple[str, ...] = tuple(BASE_PACKAGES + PLAYBOOK_PACKAGES)
    disk_gib: int = DISK_GIB
    extra_cas: tuple[str, ...] = field(default=())  # sha256 of the host's local CAs
    pyproject: str = ""  # sha256 of pyproject.toml: the venv's recipe (as run.sh's stamp)

    def digest(self) -> str:
        doc = {"v": RECIPE_VERSION, "mirror": self.mirror, "suite": self.suite,
               "packages": sorted(self.packages), "disk": self.disk_gib,
               "cas": sorted(self.extra_cas), "pyproject": self.pyproject}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def local_cas() -> list[Path]:
    """The host's own CA certificates (update-ca-certificates' local folder): a proxy that
    re-signs TLS on this machine's path re-signs the VM's too, through libvirt's NAT."""
    return sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))


def default_recipe(mirror: str = MIRROR) -> Recipe:
    cas = tuple(hashlib.sha256(p.read_bytes()).hexdigest() for p in local_cas())
    pyproject = hashlib.sha256((PROJECT / "pyproject.toml").read_bytes()).hexdigest()
    return Recipe(mirror=mirror, extra_cas=cas, pyproject=pyproject)


def insecure_public_key() -> Path:
    """Vagrant's well-known insecure key, as Debian's vagrant package ships it: Vagrant
    replaces it with a fresh key pair on the first `vagrant up`."""
    found = sorted(Path("/usr/share/rubygems-integration/all/gems").glob("vagrant-*/keys/vagrant.pub"))
    if not found:
        raise BoxError("Vagrant's insecure public key was not found (is Debian's vagrant "
                       "package installed? ./run.sh setup installs it)")
    return found[-1]


def cached_box(recipe: Recipe, cache: Path = CACHE) -> Path:
    return cache / f"debian12-{recipe.digest()}.box"


def _recipe_marker(name: str) -> Path:
    """A file beside the box Vagrant holds under `name`, naming the recipe it came from."""
    home = Path(os.environ.get("VAGRANT_HOME", Path.home() / ".vagrant.d"))
    return home / "boxes" / name.replace("/", "-VAGRANTSLASH-") / "0" / "libvirt" / "netkv-recipe"


def installed_digest(name: str = BOX_NAME) -> str | None:
    """The recipe digest of the box Vagrant holds under `name`, or None."""
    marker = _recipe_marker(name)
    return marker.read_text().strip() if marker.exists() else None


Step = Callable[[str], None]


def _run(cmd: list[str], step: str, **kw) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BoxError(f"{step}: `{' '.join(cmd[:4])}...` exited {done.returncode}:\n{tail}")
    return done.stdout


def _chroot(root: Path, script: str, step: str) -> str:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
           "LC_ALL": "C.UTF-8", "HOME": "/root"}
    return _run(["chroot", str(root), "/bin/sh", "-ec", script], step, env=env)


@contextlib.contextmanager
def _attached(image: Path, disk_gib: int) -> Iterator[str]:
    """The image's partition as a loop device (at its offset, no partition scanning)."""
    size = disk_gib * (1 << 30) - OFFSET
    dev = _run(["losetup", "--find", "--show", "--offset", str(OFFSET), "--sizelimit",
                str(size), str(image)], "attaching the image").strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


@contextlib.contextmanager
def _mounted(dev: str, where: Path) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    _run(["mount", dev, str(where)], "mounting the root file system")
    try:
        yield where
    finally:
        for sub in ("dev/pts", "dev", "sys", "proc"):
            target = where / sub
            if subprocess.run(["mountpoint", "-q", str(target)]).returncode == 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)
        subprocess.run(["umount", str(where)], capture_output=True)


def _bind_system(root: Path) -> None:
    for src, sub, kind in (("proc", "proc", "proc"), ("sysfs", "sys", "sysfs")):
        _run(["mount", "-t", kind, src, str(root / sub)], f"mounting /{sub} in the chroot")
    for sub in ("dev", "dev/pts"):
        _run(["mount", "--bind", f"/{sub}", str(root / sub)], f"binding /{sub}")


# mitigations=off: the box is a disposable test VM on a host-only network, and under
# software emulation the CPU-bug mitigations (PTI switches page tables on every kernel
# entry, flushing QEMU's software TLB) cost Python imports about 1.7x and loopback TCP
# 1.7x (measured in a TCG VM here)
KERNEL_OPTIONS = "net.ifnames=0 biosdevname=0 mitigations=off"
EXTLINUX_CONF = """DEFAULT debian
TIMEOUT 1
PROMPT 0
LABEL debian
  LINUX /boot/{kernel}
  INITRD /boot/{initrd}
  APPEND root=UUID={uuid} ro console=tty0 console=ttyS0,115200 {options}
"""

INTERFACES = """auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp

source /etc/network/interfaces.d/*
"""

# Every VM made from the box gets its own SSH host keys (strict host-key checking between
# VMs would be meaningless with one shared key pair).
HOSTKEYS_UNIT = """[Unit]
Description=Generate SSH host keys on first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

BOX_VAGRANTFILE = """Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
"""


def build(recipe: Recipe, out: Path, on_step: Step = lambda _s: None,
          workdir: Path | None = None) -> Path:
    """Build the box file `out` from `recipe`; on any failure nothing is left mounted or
    attached, and `out` is not written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="netkv-box-", dir=workdir or out.parent) as tmp:
        work = Path(tmp)
        image = work / "disk.raw"
        on_step("creating the disk image")
        with image.open("wb") as f:
            f.truncate(recipe.disk_gib * (1 << 30))
        _run(["sfdisk", "--quiet", str(image)], "partitioning", input="start=2048, type=83, bootable\n")
        with _attached(image, recipe.disk_gib) as dev:
            _run(["mkfs.ext4", "-q", "-L", "root", "-O", "^64bit,^metadata_csum", dev],
                 "making the file system")
            uuid = _run(["blkid", "-s", "UUID", "-o", "value", dev], "reading the UUID").strip()
            with _mounted(dev, work / "root") as root:
                _populate(recipe, root, uuid, on_step, out.with_suffix(".vmlinuz"))
        on_step("installing the boot sector")
        mbr = Path("/usr/lib/syslinux/mbr/mbr.bin")
        with image.open("r+b") as f:
            f.write(mbr.read_bytes()[:440])
        on_step("compressing to qcow2")
        qcow = work / "box.img"
        # zstd, not qcow2's default zlib: one core's zlib took 94 s of a 307 s build,
        # zstd 22 s for a box 4% smaller (QEMU reads either)
        _run(["qemu-img", "convert", "-c", "-o", "compression_type=zstd", "-O", "qcow2",
              str(image), str(qcow)], "converting to qcow2")
        image.unlink()
        (work / "metadata.json").write_text(json.dumps(
            {"provider": "libvirt", "format": "qcow2", "virtual_size": recipe.disk_gib}))
        (work / "Vagrantfile").write_text(BOX_VAGRANTFILE)
        on_step("packaging the box")
        partial = out.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            for name in ("metadata.json", "Vagrantfile", "box.img"):
                tar.add(work / name, arcname=name)
        partial.rename(out)
    return out


def _populate(recipe: Recipe, root: Path, uuid: str, on_step: Step, kernel_out: Path) -> None:
    base = ",".join(BASE_PACKAGES)
    on_step(f"debootstrap {recipe.suite} from {recipe.mirror}")
    _run(["debootstrap", "--variant=minbase", f"--include={base}", recipe.suite, str(root),
          recipe.mirror], "debootstrap")
    _bind_system(root)
    (root / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # start nothing here
    (root / "usr/sbin/policy-rc.d").chmod(0o755)
    (root / "etc/apt/sources.list").write_text(
        f"deb {recipe.mirror} {recipe.suite} main\n"
        f"deb {recipe.mirror} {recipe.suite}-updates main\n"
        f"deb {recipe.mirror.replace('/debian', '/debian-security')} {recipe.suite}-security main\n")
    for ca in local_cas():
        shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
    if local_cas():  # pip trusts certifi's bundle, not the system's, unless told
        (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    extra = " ".join(p for p in recipe.packages if p not in BASE_PACKAGES)
    on_step("installing the playbook's packages")
    _chroot(root, f"apt-get update -q && apt-get install -y -q --no-install-recommends {extra}"
                  " && apt-get -y -q full-upgrade && update-ca-certificates && apt-get clean",
            "installing packages")
    on_step("configuring boot, network, SSH and the vagrant user")
    (root / "etc/fstab").write_text(f"UUID={uuid} / ext4 errors=remount-ro 0 1\n")
    (root / "etc/hostname").write_text("netkv-box\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 netkv-box\n")
    (root / "etc/network/interfaces").write_text(INTERFACES)
    (root / "etc/systemd/system/ssh-hostkeys.service").write_text(HOSTKEYS_UNIT)
    (root / "etc/ssh/sshd_config.d/vagrant.conf").write_text("UseDNS no\n")
    (root / "etc/sudoers.d/vagrant").write_text("vagrant ALL=(ALL) NOPASSWD: ALL\n")
    (root / "etc/sudoers.d/vagrant").chmod(0o440)
    key = insecure_public_key().read_text()
    _chroot(root, "useradd -m -s /bin/bash vagrant && install -d -m 700 -o vagrant -g vagrant "
                  "/home/vagrant/.ssh && systemctl enable ssh-hostkeys.service",
            "adding the vagrant user")
    keys = root / "home/vagrant/.ssh/authorized_keys"
    keys.write_text(key)
    _chroot(root, "chown vagrant:vagrant /home/vagrant/.ssh/authorized_keys && "
                  "chmod 600 /home/vagrant/.ssh/authorized_keys", "installing the key")
    kernel = sorted((root / "boot").glob("vmlinuz-*"))[-1].name
    initrd = sorted((root / "boot").glob("initrd.img-*"))[-1].name
    (root / "boot/extlinux").mkdir(exist_ok=True)
    (root / "boot/extlinux/extlinux.conf").write_text(
        EXTLINUX_CONF.format(kernel=kernel, initrd=initrd, uuid=uuid,
                             options=KERNEL_OPTIONS))
    _run(["extlinux", "--install", str(root / "boot/extlinux")], "installing extlinux")
    shutil.copy(root / "boot" / kernel, kernel_out)  # for the KVM probe
    for p in (root / "etc/ssh").glob("ssh_host_*"):
        p.unlink()
    (root / "etc/machine-id").write_text("")  # each VM makes its own at first boot
    (root / "usr/sbin/policy-rc.d").unlink()
    _prebuild_venv(recipe, root, on_step)
    manifest = _chroot(root, "dpkg-query -W -f '${Package} ${Version}\\n'", "listing packages")
    (root / "etc/netkv-box-manifest").write_text(manifest)
    # an Ansible local fact: the packages role skips the list refresh when the box already
    # holds every package it would install (lists from the build would be stale anyway)
    facts = root / "etc/ansible/facts.d"
    facts.mkdir(parents=True, exist_ok=True)
    (facts / "netkv_box.fact").write_text(json.dumps(
        {"recipe": recipe.digest(), "packages": sorted(line.split()[0]
                                                        for line in manifest.splitlines())}))
    on_step(f"{len(manifest.splitlines())} packages installed")


def probe_driver(kernel: Path, timeout: float = 60.0) -> str:
    """kvm when this host's KVM boots the box's Debian kernel as far as mounting a root
    file system, qemu (software emulation) otherwise: a nested KVM can expose /dev/kvm
    and still abort on the first MSR write or hang after the firmware."""
    if not Path("/dev/kvm").exists() or not kernel.exists():
        return "qemu"
    cmd = ["qemu-system-x86_64", "-enable-kvm", "-cpu", "host", "-m", "256", "-nographic",
           "-no-reboot", "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        out = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) \
            else (exc.stdout or "")
    return "kvm" if "VFS: Unable to mount root fs" in out else "qemu"


def _prebuild_venv(recipe: Recipe, root: Path, on_step: Step) -> None:
    """The project's virtual environment, built here at native speed where the VM would
    build it under emulation: /vagrant/.venv with the same stamp the playbook's project
    role and run.sh look for, so provisioning finds it current. Vagrant's rsync leaves
    the excluded .venv in place; a changed pyproject.toml changes the recipe."""
    if not recipe.pyproject:
        return
    on_step("pre-building the project's virtual environment")
    home = root / VENV_HOME.lstrip("/")
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT / "pyproject.toml", home / "pyproject.toml")
    shutil.copytree(PROJECT / "testbed", home / "testbed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for extra in ("README.md", "LICENSE"):
        if (PROJECT / extra).exists():
            shutil.copy(PROJECT / extra, home / extra)
    _chroot(root, f"cd {VENV_HOME} && python3 -m venv --system-site-packages .venv && "
                  ".venv/bin/python -m pip install -q -e '.[dev]' && "
                  f"touch .venv/.installed-{recipe.pyproject}", "pre-building the venv")
    for child in home.iterdir():  # the checkout arrives with `vagrant up`; keep the venv
        if child.name != ".venv":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    _chroot(root, f"chown -R root:root {VENV_HOME}", "owning the venv")


def _drop_old_copies(box: Path, name: str) -> None:
    """Older recipes' box files, and the base volumes vagrant-libvirt uploaded from them
    (named after the box and its time stamp): each is a gigabyte."""
    for old in box.parent.glob("debian12-*"):
        if old.stem != box.stem:
            old.unlink()
    prefix = name.replace("/", "-VAGRANTSLASH-") + "_vagrant_box_image_"
    listed = subprocess.run(["virsh", "--connect", "qemu:///system", "vol-list", "default"],
                            capture_output=True, text=True).stdout.splitlines()
    for vol in (line.split()[0] for line in listed if line.strip()):
        if vol.startswith(prefix):
            subprocess.run(["virsh", "--connect", "qemu:///system", "vol-delete", vol,
                            "--pool", "default"], capture_output=True)


def add_to_vagrant(box: Path, recipe: Recipe, name: str = BOX_NAME) -> None:
    """`vagrant box add --force`, then mark the box with its recipe's digest; older
    copies go (a VM still running from one keeps its own disk, a snapshot's backing
    file, so only its base volume's deletion fails, silently)."""
    _drop_old_copies(box, name)
    _run(["vagrant", "box", "add", "--force", "--name", name, str(box)], "vagrant box add")
    _recipe_marker(name).write_text(recipe.digest() + "\n")


def remove_stale_builds(cache: Path = CACHE) -> list[Path]:
    """What a killed build left in the cache: mounts under its work folder, the loop
    device on its image, the folder itself. Returns the folders removed."""
    gone = []
    for work in sorted(cache.glob("netkv-box-*")):
        mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True,
                                text=True).stdout.split()
        for target in sorted((m for m in mounts if m.startswith(str(work))), reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)
        loops = subprocess.run(["losetup", "-n", "-O", "NAME,BACK-FILE", "-l"],
                               capture_output=True, text=True).stdout.splitlines()
        for line in loops:
            dev, _, backing = line.partition(" ")
            if backing.strip().startswith(str(work)):
                subprocess.run(["losetup", "-d", dev], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        gone.append(work)
    return gone


def ensure(recipe: Recipe | None = None, rebuild: bool = False, cache: Path = CACHE,
           on_step: Step = lambda _s: None) -> tuple[Path, bool]:
    """The box for `recipe` in Vagrant, built only when absent (or `rebuild`): returns the
    box file and whether it was built now."""
    recipe = recipe or default_recipe()
    box = cached_box(recipe, cache)
    built = False
    if rebuild or not box.exists():
        for stale in remove_stale_builds(cache):
            on_step(f"removed an interrupted build's leftovers: {stale}")
        for step in ("debootstrap", "qemu-img", "extlinux", "sfdisk", "losetup", "vagrant"):
            if not shutil.which(step) and not Path(f"/usr/sbin/{step}").exists():
                raise BoxError(f"{step} is missing: ./run.sh setup installs the VM tools")
        started = time.monotonic()
        build(recipe, box, on_step)
        on_step(f"built {box} in {time.monotonic() - started:.0f} s")
        built = True
    driver = cache / "driver"  # the Vagrantfile reads it
    if built or not driver.exists():
        on_step("probing whether KVM boots a Debian kernel here")
        driver.write_text(probe_driver(box.with_suffix(".vmlinuz")) + "\n")
        on_step(f"libvirt driver: {driver.read_text().strip()}")
    if built or installed_digest() != recipe.digest():
        on_step(f"adding {box.name} to Vagrant as {BOX_NAME}")
        add_to_vagrant(box, recipe)
    return box, built
