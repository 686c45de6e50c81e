"""YCSB for the built-in guest: a small Java runtime, the jars and RocksDB's native library.

The guest has no JVM (kernel + initramfs, docs/vm.md), so a qemu target that asks for
`guest_apps = ["ycsb"]` gets this bundle in its initramfs at /opt/iolab/ycsb:

- `jre/`: the host JDK's runtime cut by `jlink` to the modules YCSB and the binding need
  (MODULES: `jdeps --print-module-deps` over the class path, plus jdk.unsupported, which
  RocksDB's JNI wrapper uses), without debug symbols, with its class-data-sharing archive:
  under TCG a JVM start is dominated by class loading, which the archive skips. ~75 MB
  instead of the JDK's ~300 MB, held in guest RAM.
- `lib/`: the same jars as the host build (native/ycsb_build.py), except that rocksdbjni
  loses its 13 bundled native libraries (50 MB -> 2 MB of classes);
- `native/`: the one of them this machine's architecture loads, passed to the JVM through
  `-Djava.library.path` (RocksDB's loader tries that before unpacking from the jar).

So the guest runs the very same YCSB, binding and RocksDB as the host, on the host JDK's
version. Built by the set-up command after the host build, cached beside it under a hash of
the host build, the JDK and this layout; a trial never builds, it only looks (`installed`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from iolab.core.errors import CapabilityMissing
from iolab.native import ycsb_build

GUEST_DIR = "/opt/iolab/ycsb"  # where the bundle sits in the guest
MODULES = ("java.base", "java.management", "java.sql", "jdk.unsupported")
FORMAT = "1"  # of the bundle's layout; part of the hash
# RocksDB's name for this machine's JNI library inside rocksdbjni.jar (its NativeLibraryLoader)
ROCKSDB_ARCH = {"x86_64": "linux64", "aarch64": "linux-aarch64", "ppc64le": "linux-ppc64le", "s390x": "linux-s390x"}
# what the guest holds besides the JVM's heap: the bundle and the rest of the initramfs in RAM,
# RocksDB's memtables (2 x 64 MB by default), its block cache and the page cache under it
GUEST_OVERHEAD = 768 << 20


@dataclass(frozen=True)
class GuestBundle:
    """A finished bundle on the host, and how the guest runs YCSB from it."""

    directory: Path
    jars: tuple[str, ...]  # relative to the bundle
    facts: dict[str, object]

    def command(self) -> ycsb_build.JavaCommand:
        """YCSB in the guest, from the bundle at GUEST_DIR; RocksDB's library from native/."""
        return ycsb_build.JavaCommand(f"{GUEST_DIR}/jre/bin/java", ":".join(f"{GUEST_DIR}/{j}" for j in self.jars),
                                      (f"-Djava.library.path={GUEST_DIR}/native",),
                                      {"ycsb_build": ycsb_build.installed().facts, "guest_bundle": self.facts,
                                       "java": f"{self.facts.get('jdk')}, cut by jlink to {', '.join(MODULES)}"})


def rocksdb_library() -> str:
    arch = platform.machine()
    if arch not in ROCKSDB_ARCH:
        raise CapabilityMissing(f"rocksdbjni has no native library for {arch}: ycsb cannot run in the guest here")
    return f"librocksdbjni-{ROCKSDB_ARCH[arch]}.so"


def digest(build: ycsb_build.YcsbBuild) -> str:
    """Hash of what decides the bundle: the host build, the JDK that jlinks it, the layout."""
    h = hashlib.sha256(f"{FORMAT}\0{','.join(MODULES)}\0{build.facts.get('digest')}\0"
                       f"{ycsb_build.java_version(ycsb_build.java())}\0{platform.machine()}".encode())
    return h.hexdigest()[:16]


def bundle_dir(build: ycsb_build.YcsbBuild) -> Path:
    return ycsb_build.root() / f"guest-{digest(build)}"


def installed() -> GuestBundle:
    """The bundle for this host build, or CapabilityMissing saying how to make it (never builds)."""
    build = ycsb_build.installed()
    d = bundle_dir(build)
    try:
        facts = json.loads((d / "bundle.json").read_text())
    except (OSError, ValueError):
        raise CapabilityMissing(f"the guest's YCSB bundle is not built for this iolab ({d} missing): "
                                f"{ycsb_build.SETUP_HINT}") from None
    return GuestBundle(d, tuple(facts["jars"]), facts)


def _slim_jar(source: Path, dest: Path) -> None:
    """Copy a jar without its native libraries (rocksdbjni carries one per platform)."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if not item.filename.endswith((".so", ".jnilib", ".dll")):
                zout.writestr(item, zin.read(item.filename))


def _build_into(tmp: Path, build: ycsb_build.YcsbBuild) -> dict[str, object]:
    t0 = time.monotonic()
    # the jlink of the JDK whose java runs the host build (a machine may have several JDKs)
    sibling = Path(os.path.realpath(ycsb_build.java())).parent / "jlink"
    jlink = str(sibling) if os.access(sibling, os.X_OK) else ycsb_build.tool("jlink", "default-jdk-headless")
    ycsb_build.run_tool([jlink, "--add-modules", ",".join(MODULES), "--strip-debug", "--no-header-files",
                         "--no-man-pages", "--generate-cds-archive", "--output", str(tmp / "jre")],
                        "cutting a Java runtime for the guest (jlink)", 600)
    (tmp / "lib").mkdir()
    (tmp / "native").mkdir()
    lib_name = rocksdb_library()
    jars = []
    for path in map(Path, build.classpath):
        rel = path.relative_to(build.directory)
        if path.name.startswith("rocksdbjni-"):
            with zipfile.ZipFile(path) as z:
                (tmp / "native" / lib_name).write_bytes(z.read(lib_name))
            _slim_jar(path, tmp / "lib" / path.name)
            jars.append(f"lib/{path.name}")
        else:
            shutil.copyfile(path, tmp / "lib" / rel.name)
            jars.append(f"lib/{rel.name}")
    return {"digest": digest(build), "host_build": build.facts.get("digest"),
            "jdk": ycsb_build.java_version(ycsb_build.java()),
            "modules": list(MODULES), "jars": jars, "rocksdb_library": lib_name,
            "bytes": sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file() and not f.is_symlink()),
            "seconds": round(time.monotonic() - t0, 1)}


def build() -> GuestBundle:
    """The bundle for the host build, made now if missing (the host build must exist)."""
    host = ycsb_build.installed()
    final = bundle_dir(host)
    with open(ycsb_build.root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the same lock as the host build: one builder at a time
        if not (final / "bundle.json").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=".guest-", dir=ycsb_build.root()))
            try:
                facts = _build_into(tmp, host)
                (tmp / "bundle.json").write_text(json.dumps(facts, indent=1))  # written last: a finished bundle
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for old in ycsb_build.root().glob("guest-*"):
                if old != final and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
    return installed()


def main() -> int:
    return ycsb_build.run_build(build, lambda b: f", {int(str(b.facts['bytes'])) >> 20} MiB")


if __name__ == "__main__":
    sys.exit(main())
