"""The ns-3 engine's program, compiled once per machine against the `ns3` wheel.

PyPI's `ns3` wheel ships ns-3's headers and shared libraries; its Python bindings (cppyy)
are not used: they take about 9 s to import and keep a JIT in every process, where a
small C++ program (kvnet/: main.cc and a header per part) starts in milliseconds. It is
compiled with the system's g++ the first time it is needed (or by `./run.sh setup`), into
this user's cache under a name that is the hash of its sources, the wheel's version and
the compiler's, so an edit or an upgrade builds it again and nothing stale runs. Several
processes asking at once build it once (a lock file).

    python -m testbed.ns3sim.program    # build it now, print where it is
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

from testbed.cachedir import user_cache
from testbed.native import built_once

SOURCE = "kvnet"  # the program's folder: main.cc includes the rest
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")
FLAGS = ("-O2", "-std=c++20", "-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE", "-w")


class Ns3Unavailable(RuntimeError):
    """ns-3 cannot run here: the wheel or a compiler is missing (the message says which)."""


def wheel() -> tuple[Path, str]:
    """The installed `ns3` wheel's folder (include/, lib64/) and its version."""
    try:
        dist = metadata.distribution("ns3")
    except metadata.PackageNotFoundError:
        raise Ns3Unavailable("the ns3 package is not installed (./run.sh setup installs "
                             "it, or pip install 'netkv-testbed[ns3]')") from None
    root = Path(str(dist.locate_file("ns3")))
    if not (root / "include" / "ns3").is_dir() or not (root / "lib64").is_dir():
        raise Ns3Unavailable(f"{root}: the ns3 wheel has no include/ns3 or lib64 folder")
    return root, dist.version


def _release(version: str) -> str:
    """ns-3's release from the wheel's version: 3.44 for 3.44.post0."""
    return version.split(".post")[0]


def ns3_version() -> str:
    if os.environ.get(PREBUILT):  # its release as its builder says, where no wheel is
        try:
            return _release(wheel()[1])
        except Ns3Unavailable:
            return os.environ.get("NETKV_NS3_RELEASE", "unknown")
    return _release(wheel()[1])


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise Ns3Unavailable("no C++ compiler (g++) to build the ns-3 engine: apt-get "
                             "install g++ (./run.sh setup does)")
    return cxx


def build_dir() -> Path:
    """$NETKV_NS3_BUILD_DIR, else the user's cache (shared by every run and test)."""
    return Path(os.environ.get("NETKV_NS3_BUILD_DIR") or user_cache() / "ns3")


def _key(source: bytes, version: str, cxx: str) -> str:
    compiler = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(source + version.encode() + compiler.encode()
                            + " ".join(FLAGS).encode())
    return digest.hexdigest()[:16]


PREBUILT = "NETKV_NS3_PROGRAM"  # a program built elsewhere, taken as it is


def program_path(on_build=None) -> Path:
    """The compiled program, built now if it is not there yet. `on_build(message)` is told
    before a build starts (it takes about 10 s on two cores). $NETKV_NS3_PROGRAM names
    one built elsewhere against the same ns-3, for a server with neither the wheel nor a
    compiler (its libraries found through LD_LIBRARY_PATH; $NETKV_NS3_RELEASE names their
    release in the records)."""
    given = os.environ.get(PREBUILT)
    if given:
        # absolute: the child runs in a folder of its own
        path = Path(given).expanduser().absolute()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise Ns3Unavailable(f"{PREBUILT}={given}: not an executable file")
        return path
    root, version = wheel()
    cxx = _compiler()
    files = sorted((p for p in resources.files("testbed.ns3sim").joinpath(SOURCE).iterdir()
                    if p.name.endswith((".cc", ".h"))), key=lambda p: p.name)
    source = b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in files)
    target = build_dir() / f"kvnet-{_key(source, version, cxx)}"

    def build() -> None:
        if on_build is not None:
            on_build(f"building the ns-3 engine against ns-3 {_release(version)} (once "
                     "per machine)")
        src = target.parent / f"{target.name}.src"  # a copy: the package may be a zip
        src.mkdir(exist_ok=True)
        for p in files:
            (src / p.name).write_bytes(p.read_bytes())
        compile_program(src / "main.cc", target, MODULES)
        shutil.rmtree(src)

    return built_once(target, build)


def compile_program(main: Path, target: Path, modules: tuple[str, ...] = MODULES) -> None:
    """Compile and link a C++ program against the wheel's ns-3 (its headers and `modules`'
    libraries) with the engine's flags; `target` appears whole or not at all."""
    root, version = wheel()
    lib = root / "lib64"
    cmd = [_compiler(), *FLAGS, f"-I{root / 'include'}", str(main), "-o", f"{target}.tmp",
           f"-L{lib}", f"-Wl,-rpath,{lib}", *(f"-lns{_release(version)}-{m}" for m in modules)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise Ns3Unavailable(f"building {main.name} against ns-3 failed:\n"
                             + "\n".join(done.stderr.splitlines()[-20:]))
    os.replace(f"{target}.tmp", target)


def checked_program(on_build=None) -> Path:
    """program_path(), started once to check that it answers as this project's program does:
    what every ns-3 command calls before it makes a folder."""
    from testbed.ns3sim.process import Ns3Error, check_program

    exe = program_path(on_build)
    try:
        check_program(exe)
    except (Ns3Error, OSError) as exc:
        raise Ns3Unavailable(f"{PREBUILT}: {exc}" if os.environ.get(PREBUILT)
                             else str(exc)) from None
    return exe


def main() -> None:
    try:
        print(program_path(on_build=lambda m: print(m, file=sys.stderr, flush=True)))
    except Ns3Unavailable as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
