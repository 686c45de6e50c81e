"""The built-in guest: the host's Debian kernel plus a small initramfs.

The initramfs holds busybox, fio (a static build of the host's fio version when set-up made
one, native/guest_fio.py; else Debian's fio with every shared library it links), mke2fs, the
storage modules (resolved through modules.dep), an init script and iolab's agent. It is cached
under cache_dir()/guest/<hash>/, where the hash covers the bytes of every input, so any
package upgrade or source change produces a new image and nothing stale is reused.

A user may bring their own kernel and initramfs instead (`user_guest`); that initramfs
must start /sbin/iolab-agent (see docs/vm.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from iolab.core import children, paths
from iolab.core.digests import sha256_file
from iolab.core.errors import CapabilityMissing
from iolab.native import guest_fio
from iolab.vm import cpio, pvh

FORMAT_VERSION = "1"  # bump when the image layout changes in a way the inputs do not show
KEEP_IMAGES = 4  # cached images kept (most recently used); a workload with extra binaries has its own
COMPRESS = False  # measured: an uncompressed cpio boots faster under TCG (no gunzip in the guest)
GUEST_FIO = "/usr/bin/fio"  # which build: guest_fio.for_guest(), recorded as the manifest's guest_fio
DEFAULT_BINARIES = (GUEST_FIO, "/usr/sbin/mke2fs")  # mke2fs: guest_fs="ext4"
# Kernel modules by group. The image holds all of them; init loads "base" plus the groups
# named in the kernel argument iolab_modules= (all groups if absent), because under TCG
# each module costs boot time (insmod, relocation, and device probing such as IDE ports).
MODULE_GROUPS: dict[str, tuple[str, ...]] = {
    "base": ("virtio_pci", "virtio_console"),
    "virtio-blk": ("virtio_blk",),
    "virtio-scsi": ("virtio_scsi", "sd_mod"),
    "ide": ("ata_piix", "sd_mod"),
    "ahci": ("ahci", "sd_mod"),
    "nvme": ("nvme",),
    "ext4": ("ext4", "crc32c_generic", "crc32c-intel"),
    "net": ("virtio_net",),
}


@dataclass(frozen=True)
class GuestImage:
    """A bootable guest: kernel + initramfs; `digest` is None for user-provided images."""

    kernel: Path
    initramfs: Path
    kernel_release: str | None = None
    digest: str | None = None
    builtin: bool = True
    contents: dict[str, object] = field(default_factory=dict)

    def manifest(self) -> dict[str, object]:
        return {"kernel": str(self.kernel), "initramfs": str(self.initramfs),
                "kernel_release": self.kernel_release, "digest": self.digest,
                "builtin": self.builtin, **self.contents}


# ---------------------------------------------------------------- inputs from the host

def host_kernel() -> tuple[Path, str]:
    """Newest /boot/vmlinuz-* that has its modules installed: (path, release)."""
    candidates = []
    for k in Path("/boot").glob("vmlinuz-*"):
        release = k.name[len("vmlinuz-"):]
        if (Path("/lib/modules") / release / "modules.dep").exists():
            candidates.append((k, release))
    if not candidates:
        raise CapabilityMissing(
            "no guest kernel: need /boot/vmlinuz-* with /lib/modules/<release>/modules.dep "
            "(Debian: apt-get install linux-image-amd64)")
    candidates.sort(key=lambda kr: _version_key(kr[1]))
    kernel, release = candidates[-1]
    if not os.access(kernel, os.R_OK):
        raise CapabilityMissing(f"{kernel} is not readable (run as root or pass kernel=...)")
    return kernel, release


def _version_key(release: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", release)]


def find_busybox() -> Path:
    """A static busybox: a dynamic one would drag its own libraries in."""
    for p in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
        if p.exists() and not _dynamic_libs(p):
            return p
    raise CapabilityMissing("no static busybox (Debian: apt-get install busybox-static)")


def _dynamic_libs(binary: Path, missing_ok: bool = False) -> list[Path]:
    """Shared libraries `binary` needs (ldd), including the dynamic loader; [] if static.
    missing_ok: a library ldd cannot find is skipped (an application's own, which it loads
    from its tree: the JVM's libjava.so finds libjvm.so once libjvm.so is loaded)."""
    proc = children.run(["ldd", str(binary)], capture_output=True, text=True)
    if proc.returncode != 0 or "not a dynamic executable" in proc.stdout + proc.stderr:
        return []
    libs = []
    for line in proc.stdout.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(Path(m.group(1)))
        elif "not found" in line and not missing_ok:
            raise CapabilityMissing(f"{binary}: shared library missing on the host: {line.strip()}")
    return libs


def binary_entries(binary: Path, guest_path: str | None = None) -> list[cpio.Entry]:
    """A host binary at `guest_path` (default: its host path) and all its libraries."""
    if not binary.exists():
        raise CapabilityMissing(f"binary to include in the guest not found: {binary}")
    out = [cpio.file_from(guest_path or str(binary), binary.resolve())]
    for lib in _dynamic_libs(binary):
        out.append(cpio.file_from(str(lib), lib.resolve()))
    return out


def module_closure(moddir: Path, wanted: Iterable[str]) -> list[str]:
    """Module paths (relative to moddir) for `wanted` and their deps, dependencies first.

    Names missing from modules.dep are skipped: they are built in or absent on this kernel.
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
        by_name[_mod_name(mod)] = mod
    order: list[str] = []

    def visit(mod: str) -> None:
        if mod in order:
            return
        for d in deps.get(mod, []):
            visit(d)
        order.append(mod)

    for name in wanted:
        found = by_name.get(name.replace("-", "_"))
        if found:
            visit(found)
    return order


def _mod_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for ext in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base.replace("-", "_")


# ---------------------------------------------------------------- the agent

def guest_source(name: str) -> bytes:
    """A file shipped in iolab/vm/guest (agent.c, init.sh)."""
    return resources.files("iolab.vm").joinpath("guest", name).read_bytes()


def build_agent() -> Path:
    """Compile the agent statically (cached by source and compiler version)."""
    src = guest_source("agent.c")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise CapabilityMissing("a C compiler is needed to build the guest agent (apt-get install gcc)")
    cc_version = children.run([gcc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(src + cc_version.encode()).hexdigest()[:16]
    out = paths.cache_dir() / "agent" / key / "iolab-agent"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        c = Path(tmp) / "agent.c"
        c.write_bytes(src)
        binary = Path(tmp) / "iolab-agent"
        proc = children.run([gcc, "-static", "-O2", "-Wall", "-o", str(binary), str(c)],
                            capture_output=True, text=True)
        if proc.returncode != 0:
            raise CapabilityMissing(f"building the guest agent failed (static libc needed, "
                                    f"apt-get install libc6-dev):\n{proc.stderr[-2000:]}")
        os.replace(binary, out)
    return out


# ---------------------------------------------------------------- assembling the image

def tree_entries(guest_dir: str, host_dir: Path) -> list[cpio.Entry]:
    """Every directory, file and symlink under `host_dir`, at `guest_dir` with its mode (an
    application's own tree, e.g. a Java runtime), and the host libraries its ELF files need
    from outside the tree (libstdc++ for RocksDB's JNI library, ...)."""
    if not host_dir.is_dir():
        raise CapabilityMissing(f"directory to include in the guest not found: {host_dir}")
    top = host_dir.resolve()
    out = [cpio.directory(guest_dir)]
    for path in sorted(host_dir.rglob("*")):
        name = f"{guest_dir.rstrip('/')}/{path.relative_to(host_dir)}"
        if path.is_symlink():
            out.append(cpio.symlink(name, os.readlink(path)))
        elif path.is_dir():
            out.append(cpio.directory(name))
        elif path.is_file():
            out.append(cpio.file_from(name, path, path.stat().st_mode & 0o777))
            if _is_elf(path):
                out += [cpio.file_from(str(lib), lib.resolve()) for lib in _dynamic_libs(path, missing_ok=True)
                        if not lib.resolve().is_relative_to(top)]
    return out


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def fio_entries(fio: guest_fio.GuestFio) -> list[cpio.Entry]:
    """fio at /usr/bin/fio: the static build alone, or Debian's with its libraries."""
    if fio.build == "static-minimal":
        return [cpio.file_from(GUEST_FIO, fio.binary)]
    return binary_entries(fio.binary, GUEST_FIO)


def image_entries(release: str, extra_binaries: Iterable[Path | str] = (),
                  extra_files: Mapping[str, Path | str] | None = None,
                  extra_trees: Mapping[str, Path] | None = None,
                  fio: guest_fio.GuestFio | None = None) -> list[cpio.Entry]:
    """Every member of the initramfs; the image hash is computed over these. fio: which fio
    the guest carries (default: guest_fio.for_guest())."""
    moddir = Path("/lib/modules") / release
    mods = module_closure(moddir, [m for group in MODULE_GROUPS.values() for m in group])
    entries = [
        cpio.file_data("init", guest_source("init.sh"), 0o755),
        cpio.file_from("sbin/iolab-agent", build_agent()),
        cpio.file_from("bin/busybox", find_busybox()),
        *(cpio.file_data(f"etc/iolab/modules.{group}",
                         ("\n".join(module_closure(moddir, names)) + "\n").encode())
          for group, names in MODULE_GROUPS.items()),
        cpio.file_data("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
        cpio.file_data("etc/group", b"root:x:0:\n"),
        cpio.file_data(f"lib/modules/{release}/modules.dep", _dep_subset(moddir, mods)),
    ]
    entries += [cpio.file_from(f"lib/modules/{release}/{m}", moddir / m, 0o644) for m in mods]
    entries += [cpio.directory(d) for d in ("proc", "sys", "dev", "run", "tmp", "mnt", "root", "usr/sbin")]
    entries.append(cpio.symlink("sbin/modprobe", "/bin/busybox"))
    if Path("/etc/mke2fs.conf").exists():
        entries.append(cpio.file_from("etc/mke2fs.conf", Path("/etc/mke2fs.conf"), 0o644))
    entries += fio_entries(fio or guest_fio.for_guest())  # first: an extra /usr/bin/fio does not replace it
    for b in [*DEFAULT_BINARIES, *extra_binaries]:
        if str(b) != GUEST_FIO:
            entries += binary_entries(Path(b))
    for guest_path, host in (extra_files or {}).items():
        entries += binary_entries(Path(host), guest_path)
    for guest_dir, host_dir in (extra_trees or {}).items():
        entries += tree_entries(guest_dir.strip("/"), Path(host_dir))
    return _dedupe(entries)


def _dep_subset(moddir: Path, mods: list[str]) -> bytes:
    """modules.dep restricted to the included modules, so busybox modprobe works in the guest."""
    keep = set(mods)
    lines = [ln for ln in (moddir / "modules.dep").read_text().splitlines()
             if ln.partition(":")[0] in keep]
    return ("\n".join(lines) + "\n").encode()


def _dedupe(entries: list[cpio.Entry]) -> list[cpio.Entry]:
    seen: dict[str, cpio.Entry] = {}
    for e in entries:
        seen.setdefault(e.name, e)
    return list(seen.values())


def content_digest(kernel: Path, entries: list[cpio.Entry]) -> str:
    """sha256 over the kernel bytes and every member's name, mode and bytes."""
    h = hashlib.sha256(f"iolab-guest v{FORMAT_VERSION} compress={COMPRESS}\n".encode())
    h.update(_file_hash(kernel).encode())
    for e in sorted(entries, key=lambda e: e.name):
        if e.source is not None:
            digest = _file_hash(e.source)
        else:
            digest = hashlib.sha256(e.payload()).hexdigest()
        h.update(f"{e.name}\0{e.mode:o}\0{digest}\n".encode())
    return h.hexdigest()[:20]


def _file_hash(p: Path) -> str:
    return sha256_file(p)


def build_guest(extra_binaries: Iterable[Path | str] = (),
                extra_files: Mapping[str, Path | str] | None = None,
                kernel: Path | None = None,
                extra_trees: Mapping[str, Path] | None = None) -> GuestImage:
    """The built-in guest, built once per distinct set of inputs and then reused.

    extra_binaries: host binaries placed at the same path in the guest, with their libraries
    (e.g. /usr/bin/sysbench). extra_files: guest path -> host binary (e.g. a native helper
    built in a temp dir). extra_trees: guest directory -> host directory copied whole (an
    application such as YCSB's Java runtime, tree_entries). All are part of the content hash.
    """
    if kernel is None:
        kernel, release = host_kernel()
    else:
        release = _release_of(kernel)
    fio = guest_fio.for_guest()
    entries = image_entries(release, extra_binaries, extra_files, extra_trees, fio)
    digest = content_digest(kernel, entries)
    out = paths.cache_dir() / "guest" / digest
    meta = {"binaries": sorted({*DEFAULT_BINARIES, *map(str, extra_binaries)}), "guest_fio": fio.manifest(),
            "extra_files": sorted((extra_files or {}).keys()),
            **({"extra_trees": sorted(extra_trees)} if extra_trees else {}),
            "modules": (Path("/lib/modules") / release).name}
    if not (out / "manifest.json").exists():
        _materialise(out, kernel, entries, lambda boot: _image(out, release, digest, meta, boot))
        _prune(out.parent, keep=KEEP_IMAGES)
    os.utime(out / "manifest.json")  # last use, for pruning
    boot = json.loads((out / "manifest.json").read_text()).get("boot_protocol", "bzimage")
    return _image(out, release, digest, meta, boot)


def _prune(directory: Path, keep: int) -> None:
    """Drop all but the `keep` most recently used images (each is ~150 MB)."""
    images = [d for d in directory.iterdir() if (d / "manifest.json").exists()]
    images.sort(key=lambda d: (d / "manifest.json").stat().st_mtime, reverse=True)
    for d in images[keep:]:
        shutil.rmtree(d, ignore_errors=True)


def _image(out: Path, release: str, digest: str, meta: Mapping[str, object], boot: str) -> GuestImage:
    kernel = out / ("vmlinux" if boot == "pvh" else "vmlinuz")
    return GuestImage(kernel, out / _initramfs_name(), release, digest, True,
                      {**meta, "boot_protocol": boot})


def _initramfs_name() -> str:
    return "initramfs.cpio.gz" if COMPRESS else "initramfs.cpio"


def _materialise(out: Path, kernel: Path, entries: list[cpio.Entry],
                 describe: Callable[[str], GuestImage]) -> None:
    """Write into a temp dir and rename: concurrent builders never see half an image."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        elf = pvh.vmlinux(kernel)
        image = describe("pvh" if elf is not None else "bzimage")
        if elf is not None:
            (tmp / image.kernel.name).write_bytes(elf)
        else:
            shutil.copyfile(kernel, tmp / image.kernel.name)
        cpio.write_archive(entries, tmp / _initramfs_name(), COMPRESS)
        (tmp / "manifest.json").write_text(json.dumps(
            {**image.manifest(), "members": sorted(e.name for e in entries)}, indent=1))
        try:
            os.rename(tmp, out)
        except OSError:  # another process won the race; its image has the same content
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _release_of(kernel: Path) -> str:
    """Kernel release from a vmlinuz name, or from the bzImage header string."""
    if kernel.name.startswith("vmlinuz-"):
        return kernel.name[len("vmlinuz-"):]
    data = kernel.read_bytes()[:65536]
    m = re.search(rb"(\d+\.\d+\.\d+\S*) \(", data)
    if not m:
        raise CapabilityMissing(f"cannot tell the kernel release of {kernel}; name it vmlinuz-<release>")
    return m.group(1).decode()


def user_guest(kernel: Path | str, initramfs: Path | str) -> GuestImage:
    """A user-provided kernel + initramfs; the initramfs must run /sbin/iolab-agent."""
    k, i = Path(kernel), Path(initramfs)
    for p in (k, i):
        if not p.is_file():
            raise CapabilityMissing(f"guest file not found: {p}")
    return GuestImage(k, i, None, None, False, {"user_provided": True})
