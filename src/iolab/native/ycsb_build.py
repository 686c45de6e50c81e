"""Build the `ycsb` workload's Java side once and cache it: YCSB core, rocksdbjni, iolab's binding.

The pinned pom (`native/ycsb/pom.xml`) names YCSB core 0.17.0 and rocksdbjni 6.29.5 from
Maven Central; `mvn dependency:copy-dependencies` puts them and their runtime dependencies
(as YCSB's own pom declares them) into the build directory, and javac compiles iolab's
binding (`native/ycsb/IolabRocksDbClient.java`) against them. Like the C helpers
(native/build.py), the result is named after a hash of its sources and flags, under
`$IOLAB_CACHE/ycsb/`: editing the pom or the binding builds a new one; a build goes to a
temporary directory that is renamed into place, under a lock, so two iolab processes never
see half of one. Maven's own repository sits beside it (`$IOLAB_CACHE/ycsb/maven-repo`), so
a rebuild after a source change tries offline first and reaches Maven Central only for
what it lacks.

Set-up builds it (`./setup.sh install` runs `python -m iolab.native.ycsb_build`); a trial
never builds, it only looks (`installed()`): a first build downloads ~55 MB, which does not
belong inside a measurement.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from iolab.core import children
from iolab.core.errors import CapabilityMissing, IolabError
from iolab.core.paths import cache_dir

SOURCES: tuple[str, ...] = ("pom.xml", "IolabRocksDbClient.java")
JAVAC_FLAGS: tuple[str, ...] = ("--release", "11", "-Xlint:all", "-encoding", "UTF-8")
STRICT_JAVAC_FLAGS: tuple[str, ...] = JAVAC_FLAGS + ("-Werror",)
DB_CLASS = "iolab.ycsb.IolabRocksDbClient"
CLIENT_CLASS = "site.ycsb.Client"
FORMAT = "1"  # of the build directory's layout; part of the hash
SETUP_HINT = "run ./setup.sh install (or: python -m iolab.native.ycsb_build)"
JAVA_MISSING = ("java not found: the ycsb workload runs YCSB's Java client; install a JDK "
                "(Debian/Ubuntu: apt-get install default-jdk-headless) or " + SETUP_HINT)


@dataclass(frozen=True)
class JavaCommand:
    """How to start YCSB's client where a trial runs: on the host (YcsbBuild.command) or in the
    built-in guest (ycsb_guest.GuestBundle.command): the launcher, class path, extra JVM flags,
    and what the manifest records of them."""

    java: str
    classpath: str
    flags: tuple[str, ...]
    facts: dict[str, object]


@dataclass(frozen=True)
class YcsbBuild:
    """A finished build: where it is and the class path to run YCSB with."""

    directory: Path
    classpath: tuple[str, ...]
    facts: dict[str, object]

    @property
    def classpath_arg(self) -> str:
        return os.pathsep.join(self.classpath)

    def command(self) -> JavaCommand:
        """YCSB on the host, with the host's java."""
        launcher = java()
        return JavaCommand(launcher, self.classpath_arg, (),
                           {"ycsb_build": self.facts, "java": java_version(launcher)})


def _source(name: str) -> bytes:
    return (resources.files(__package__) / "ycsb" / name).read_bytes()


def digest() -> str:
    """Hash of everything that decides the build: the sources, javac's flags, the layout."""
    h = hashlib.sha256(FORMAT.encode())
    for name in SOURCES:
        h.update(b"\0" + name.encode() + b"\0" + _source(name))
    h.update("\0".join(JAVAC_FLAGS).encode())
    return h.hexdigest()[:16]


def root() -> Path:
    return cache_dir() / "ycsb"


def build_dir() -> Path:
    return root() / f"build-{digest()}"


def java() -> str:
    """The java launcher; CapabilityMissing naming the package when it is not installed."""
    found = shutil.which("java")
    if not found:
        raise CapabilityMissing(JAVA_MISSING)
    return found


def installed() -> YcsbBuild:
    """The build for these sources, or CapabilityMissing saying how to make it (never builds)."""
    java()
    d = build_dir()
    try:
        classpath = tuple((d / "classpath").read_text().split("\n"))
        facts = json.loads((d / "build.json").read_text())
    except (OSError, ValueError):
        raise CapabilityMissing(f"the ycsb workload's jars are not built for this iolab ({d} missing): "
                                f"{SETUP_HINT}") from None
    missing = [p for p in classpath if not Path(p).is_file()]
    if missing:
        raise CapabilityMissing(f"the ycsb build in {d} is incomplete ({missing[0]} missing): remove {d} and "
                                f"{SETUP_HINT}")
    return YcsbBuild(d, classpath, facts)


def tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if not found:
        raise CapabilityMissing(f"{name} not found: building the ycsb workload needs it "
                                f"(Debian/Ubuntu: apt-get install {package})")
    return found


def run_tool(argv: list[str], what: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        proc = children.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise IolabError(f"{what} took longer than {timeout:g} s: {' '.join(argv)}") from None
    if proc.returncode != 0:
        raise IolabError(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr).strip()[-3000:]}")
    return proc


def _resolve(pom: Path, lib: Path) -> bool:
    """Copy the pinned jars into `lib`: offline first (Maven's repository here may have them
    all), then online. Returns whether Maven Central was needed."""
    mvn = tool("mvn", "maven")
    argv = [mvn, "-B", "-q", "-f", str(pom), f"-Dmaven.repo.local={root() / 'maven-repo'}",
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    try:
        run_tool([argv[0], "-o", *argv[1:]], "resolving the ycsb jars offline", 300)
        return False
    except IolabError:
        shutil.rmtree(lib, ignore_errors=True)
    run_tool(argv, "resolving the ycsb jars from Maven Central (mvn dependency:copy-dependencies)", 1200)
    return True


@functools.lru_cache(maxsize=4)
def java_version(launcher: str) -> str:
    """`java -version`'s first line, once per process: which JVM ran the trials."""
    out = children.run([launcher, "-version"], capture_output=True, text=True, timeout=60)
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def compile_binding(source: Path, jars: list[str], classes: Path, flags: tuple[str, ...] = JAVAC_FLAGS) -> None:
    """javac the binding against the jars. No -Werror here: a newer JDK's new lint warning must
    not stop a user's set-up; the tests compile with STRICT_JAVAC_FLAGS to keep it warning-free."""
    run_tool([tool("javac", "default-jdk-headless"), *flags, "-cp", os.pathsep.join(jars), "-d", str(classes),
          str(source)], "compiling iolab's YCSB binding", 300)


def _build_into(tmp: Path) -> tuple[list[str], dict[str, object]]:
    """Resolve, compile and pack in `tmp`; (jar paths relative to the build, facts of the build)."""
    jar = tool("jar", "default-jdk-headless")
    for name in SOURCES:
        (tmp / name).write_bytes(_source(name))
    lib = tmp / "lib"
    t0 = time.monotonic()
    online = _resolve(tmp / "pom.xml", lib)
    jars = sorted(str(p) for p in lib.glob("*.jar"))
    if not any(Path(j).name.startswith("core-") for j in jars):
        raise IolabError(f"Maven copied no YCSB core jar into {lib}: {', '.join(jars) or 'nothing'}")
    classes = tmp / "classes"
    compile_binding(tmp / "IolabRocksDbClient.java", jars, classes)
    run_tool([jar, "cf", str(tmp / "iolab-ycsb.jar"), "-C", str(classes), "."], "packing iolab's YCSB binding", 120)
    shutil.rmtree(classes)
    names = ["iolab-ycsb.jar", *(f"lib/{Path(j).name}" for j in jars)]
    return names, {"digest": digest(), "jars": [Path(j).name for j in jars], "jdk": java_version(java()),
                   "maven_central": online, "seconds": round(time.monotonic() - t0, 1)}


def build() -> YcsbBuild:
    """The build for these sources, made now if missing (Maven Central the first time)."""
    java()
    final = build_dir()
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the second finds the first's
        if not (final / "build.json").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root()))
            try:
                names, facts = _build_into(tmp)
                # the class path names the final place; build.json, written last, marks a finished build
                (tmp / "classpath").write_text("\n".join(str(final / n) for n in names))
                (tmp / "build.json").write_text(json.dumps(facts, indent=1))
                shutil.rmtree(final, ignore_errors=True)  # a broken leftover without build.json
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            _remove_stale(final)
    return installed()


def _remove_stale(keep: Path) -> None:
    """Builds of older sources go (55 MB each); Maven's repository stays for the next one."""
    for old in root().glob("build-*"):
        if old != keep and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def run_build(make: Callable[[], Any], size: Callable[[Any], str] = lambda _: "") -> int:
    """The set-up command's step: build (or find) and print where it is; exit 1 with the reason."""
    t0 = time.monotonic()
    try:
        b = make()
    except IolabError as exc:
        print(f"iolab: {exc}", file=sys.stderr)
        return 1
    print(f"   {b.directory} ({time.monotonic() - t0:.1f} s{size(b)})")
    return 0


def main() -> int:
    return run_build(build)


if __name__ == "__main__":
    sys.exit(main())
