"""Small C++ kernels beside the Python they speed up, built once per machine.

A kernel's source sits in its package (a `native/` folder); it is compiled with the
system's g++ (./run.sh setup installs it, and builds every kernel) the first time a
process needs it, into this user's cache under a name that is the hash of the source,
the flags and the compiler's version, so an edit or an upgrade builds it again and
nothing stale is loaded; several processes asking at once build it once (a lock file).
Loaded with ctypes: nothing to install beyond the compiler. Every kernel has the Python
it replaces beside it, which runs where it cannot be built.

    python -m testbed.native    # build every kernel now, print where they are
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from testbed.cachedir import user_cache

FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-w")
# every kernel's source, for `python -m testbed.native` (setup builds them all)
KERNELS = tuple(sorted(Path(__file__).parent.glob("*/native/*.cc")))


class NativeUnavailable(RuntimeError):
    """A kernel cannot be built here (the message says why)."""


def _compiler() -> str:
    given = os.environ.get("CXX")
    cxx = shutil.which(given) if given else shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise NativeUnavailable(f"no C++ compiler ({given or 'g++'}): apt-get install g++ "
                                "(./run.sh setup does)")
    return cxx


def library_path(source: Path) -> Path:
    """The kernel built from `source`, built now if it is not there yet (seconds)."""
    if not source.is_file():
        raise NativeUnavailable(f"{source} is missing (an install without the package's "
                                "C++ sources)")
    cxx = _compiler()
    text = source.read_bytes()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(text + version.encode() + " ".join(FLAGS).encode()).hexdigest()
    target = user_cache() / "native" / f"{source.stem}-{key[:16]}.so"

    def build() -> None:
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run([cxx, *FLAGS, str(source), "-o", str(tmp)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeUnavailable(f"building {source.name} failed:\n"
                                    + "\n".join(done.stderr.splitlines()[-20:]))
        os.replace(tmp, target)

    return built_once(target, build)


def built_once(target: Path, build: Callable[[], None]) -> Path:
    """`target`, made by `build()` (which writes it whole, e.g. by a rename) unless it is
    there: one build for several processes asking at once (a lock file beside it)."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():  # else another process built it while this one waited
            build()
    return target


@cache
def library(source: Path, signatures: tuple) -> ctypes.CDLL:
    """The loaded kernel, its functions given `signatures`: ((name, restype, argtypes),
    ...); raises NativeUnavailable (or OSError) where it cannot be built or loaded."""
    lib = ctypes.CDLL(str(library_path(source)))
    for name, res, args in signatures:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, list(args)
    return lib


@cache
def warn_once(message: str) -> None:
    """A kernel's fallback, said once per process."""
    print(f"warning: {message}", file=sys.stderr)


def main() -> None:
    try:
        for source in KERNELS:
            print(library_path(source))
    except NativeUnavailable as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
