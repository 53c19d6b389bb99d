#!/usr/bin/env bash
# One entry point for a fresh Debian machine: installs what is missing, builds the
# virtual environment, then runs what you asked for.
#   ./run.sh demo   set up if needed, validate the small scenario: the flow model against
#                   packets (the emulation and ns-3 as root, ns-3 alone without), and
#                   print the answer and where the report is
#   ./run.sh test   set up if needed, run the test suite
#   ./run.sh setup  set up only
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
VENV=$ROOT/.venv
# Debian's python3: later issues need Mininet, which Debian installs into this
# interpreter's site-packages, so the venv is built from it with system site-packages.
PY=/usr/bin/python3
# What building the venv needs (g++: the ns-3 engine's program and the flow simulator's
# sharing are compiled here); the playbook (testbed provision --local) installs the rest.
# Without root, the emulation's packages must already be there (tests skip).
APT_PACKAGES=(python3 python3-venv python3-pip git g++)

log() { printf '\033[1m[run.sh]\033[0m %s\n' "$*" >&2; }

missing_of() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

install_system_packages() {
    local missing
    mapfile -t missing < <(missing_of "${APT_PACKAGES[@]}")
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        log "missing Debian packages: ${missing[*]}; run as root or install them with apt-get"
        exit 1
    fi
    log "installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

build_venv() {
    # The stamp's name is the recipe's hash; the playbook's project role uses the same one.
    local want
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    local stamp=$VENV/.installed-$want
    if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ]; then
        return 0
    fi
    log "building virtual environment in .venv"
    [ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
    rm -f "$VENV"/.installed-*
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[dev,ns3]"
    echo "$want" >"$stamp"
}

start_openvswitch() {
    # Debian's init script: works without systemd (containers, CI). Userspace datapath
    # needs no kernel module; the emulation picks the datapath itself.
    if ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "Open vSwitch is not running and starting it needs root; emulation tests will skip"
        return 0
    fi
    log "starting Open vSwitch"
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || true
    ovs-vsctl --timeout=10 show >/dev/null || { log "Open vSwitch failed to start"; exit 1; }
}

setup() {
    install_system_packages
    build_venv
    if [ "$(id -u)" -eq 0 ]; then
        # the one provisioning path (playbooks/testbed.yml), exercised on every run
        log "provisioning this machine (testbed provision --local --dev)"
        "$VENV/bin/testbed" provision --local --dev --quiet
    fi
    start_openvswitch
    # the ns-3 engine's program, compiled once per machine (about 10 s; cached); without
    # it only `--engine ns3` is missing (its tests say so)
    "$VENV/bin/python" -m testbed.ns3sim.program >/dev/null ||
        log "the ns-3 engine could not be built (above); simulate --engine ns3 will say why"
    # the C++ kernels (the flow simulator's max-min sharing: seconds, cached); without them
    # their Python counterparts run, slower, and say so
    "$VENV/bin/python" -m testbed.native >/dev/null ||
        log "the C++ kernels could not be built (above)"
}

pytest_phase() {
    # "no tests collected" (exit 5) is no failure: a selection may leave a phase empty
    local code=0
    "$VENV/bin/python" -m pytest "$@" || code=$?
    [ "$code" -eq 5 ] && code=0
    return "$code"
}

run_tests() {
    # the CPU-bound unit tests on every core (pytest-xdist), then alone what runs real
    # processes against the wall clock (the emulation, the workers, the VMs: beside other
    # tests they would measure the machine), then one list of the suite's 30 slowest
    local rc=0 durations
    durations=$(mktemp)
    export NETKV_DURATIONS=$durations
    pytest_phase -n auto -m "not root and not vm and not serial" "$@" || rc=$?
    pytest_phase -p no:xdist -m "(root or serial) and not vm" "$@" || rc=$?
    pytest_phase -p no:xdist -m vm "$@" || rc=$?
    "$VENV/bin/python" -m tests.slowest "$durations" 30
    rm -f "$durations"
    return "$rc"
}

cmd=${1:-demo}
shift || true
case "$cmd" in
    setup) setup ;;
    demo)
        setup
        # both packet engines as root (the emulation's seed, ns-3 adding seeds until the
        # flow model's claims are conclusive or 30 minutes are spent; about 20 minutes
        # here), ns-3 alone without root; the answer last (docs/validation.md)
        exec "$VENV/bin/testbed" validate scenarios/validate.yaml "$@"
        ;;
    test)
        setup
        "$VENV/bin/ruff" check testbed tests benchmarks examples scripts
        run_tests "$@"
        ;;
    *)
        echo "usage: ./run.sh [demo|test|setup] [extra args]" >&2
        exit 2
        ;;
esac
