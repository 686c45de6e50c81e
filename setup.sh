#!/usr/bin/env bash
# iolab set-up: installs everything a fresh Debian machine needs, then runs one thing.
#   ./setup.sh demo   install + run the default study on the embedded default target; ends with the report path
#   ./setup.sh test   install + ruff on src/ and tests/, mypy on src/ + the whole test suite (this is what CI runs)
#   ./setup.sh install   install only
set -euo pipefail
cd "$(dirname "$0")"
action="${1:-install}"

# System packages, and why each is here (docs/architecture.md#dependencies):
APT_PACKAGES=(
  fio                 # the I/O engine for all disk I/O
  bubblewrap          # bwrap: every trial's processes run confined to what iolab made or the user named (core/confine.py)
  fio-examples        # fio's own example job files: the job-file sandbox is tested against every one
  qemu-system-x86     # guests for the VM studies
  qemu-utils          # qemu-img: images and their metadata
  linux-image-amd64   # the built-in guest's kernel
  busybox-static      # the built-in guest's userland
  kmod cpio           # assembling the guest initramfs
  e2fsprogs util-linux   # mkfs.ext4, losetup, blkid on scratch devices
  gcc libc6-dev       # iolab's native helpers (write-mode program, guest agent)
  make libaio-dev zlib1g-dev   # the built-in guest's static fio (native/guest_fio.py): libaio.a keeps its libaio engine, libz.a its client/server compression
  stress-ng           # a real CPU hog for the doctor test that must see one (and .ci/stressed-run's load)
  strace              # counting QEMU's host syscalls (sync-amplification); the varmail tests read the helper's calls
  sysbench iperf3     # CPU and network workloads (vm-profile)
  rocksdb-tools       # db_bench: the real application beside cgroups (cgroup-weights)
  default-jdk-headless   # java runs YCSB's client (the ycsb workload); javac builds iolab's RocksDB binding
  maven               # fetches the pinned YCSB core and rocksdbjni jars from Maven Central, once (native/ycsb/pom.xml)
  chromium            # the test suite opens the HTML report in a real headless browser
  libpq5              # the PostgreSQL client library psycopg loads (a team results store, docs/store.md)
  postgresql          # a real server the store tests start in a temporary directory (never the system one)
  python3 python3-venv
)

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "iolab needs root (loop devices, cgroups, schedulers). Run: sudo $0 $action" >&2
    exit 1
  fi
}

install_system() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

install_python() {
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import iolab, pytest, xdist, playwright, mypy" 2>/dev/null \
     || [ ! -x .venv/bin/ruff ] \
     || [ pyproject.toml -nt .venv/.installed ]; then
    echo "== installing iolab and its pinned dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -e '.[test]'
    touch .venv/.installed
  fi
  echo "== building native helpers"
  .venv/bin/python -c "from iolab.native import build_all; [print('  ', p) for p in build_all()]"
  echo "== building the ycsb workload's jars (cached; the first time from Maven Central)"
  .venv/bin/python -m iolab.native.ycsb_build
  echo "== cutting the guest's Java runtime for ycsb in a guest (cached)"
  .venv/bin/python -m iolab.native.ycsb_guest
  echo "== building the built-in guest's static fio, the host's fio version from Debian's source (cached)"
  .venv/bin/python -m iolab.native.guest_fio
}

install_accounts() {
  # the fleet's unprivileged users (docs/fleet.md): iolab also makes them on first use
  echo "== fleet users (iolab-fio-client runs fio's clients, iolab-fio runs fio's server on a fleet host)"
  .venv/bin/python -c "from iolab.fleet import accounts as a; [print('  ', a.ensure(n)[0]) for n in (a.CLIENT_USER, a.SERVER_USER)]"
}

need_root
install_system
install_python
install_accounts
case "$action" in
  install) echo "installed: .venv/bin/iolab" ;;
  demo)    exec .venv/bin/iolab study write-modes ;;
  test)
    # lint and types first (pinned in pyproject's [test] extras; configured there): a finding fails the run
    echo "== ruff check src tests"
    .venv/bin/ruff check src tests
    echo "== mypy (src/iolab)"
    .venv/bin/mypy
    # in parallel: -n auto asks tests/machine.py (usable CPUs + 1, bounded); loadgroup keeps an
    # xdist_group on one worker (the one reproduce run's tests; the whole_machine tests, which run
    # alone and never beside the reproduce run: tests/machine.py)
    exec .venv/bin/python -m pytest -ra --durations=40 -n auto --dist loadgroup tests ;;
  *) echo "usage: $0 [install|demo|test]" >&2; exit 2 ;;
esac
