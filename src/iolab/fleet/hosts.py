"""A fleet host as a spec names it, and how `fio --client` addresses it.

A host is where `fio --server` runs: an IPv4 or IPv6 address (or a DNS name) with a port,
or a unix socket path. Its `name` becomes part of metric names (`host:<name>:iops`), so it
is restricted to the characters a declared metric label allows.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from iolab.core.errors import SpecError
from iolab.core.inputs import parse_user_toml, read_user_text

DEFAULT_PORT = 8765  # fio's own default (fio --server)
_NAME = re.compile(r"[A-Za-z0-9_.]{1,64}")
_DNS = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")
_PATH = re.compile(r"/[A-Za-z0-9_./+-]{1,4094}")


class FleetHost(BaseModel):
    """One host of a fleet: where its fio server listens and what its job writes to.

    same_machine: the host shares this machine's block devices (a network namespace or a
    container here, or a server on loopback / a unix socket): its device is judged by the
    local data-safety guard (core.diskguard). Otherwise the device is judged remotely through
    fio itself (it must read as zeros at its start and end)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    address: str
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    device: str | None = None
    filename: str | None = None
    same_machine: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError(f"host name {v!r}: 1-64 letters, digits, '_' or '.' (it is part of metric names)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        if v.startswith("/"):
            if not _PATH.fullmatch(v) or "/../" in v + "/":
                raise ValueError(f"unix socket path {v!r}: letters, digits, '_./+-' only, no '..'")
            return v
        try:
            return str(ipaddress.ip_address(v.strip("[]")))
        except ValueError:
            pass
        if not _DNS.fullmatch(v):
            raise ValueError(f"{v!r} is neither an IPv4/IPv6 address, a host name nor a unix socket path")
        return v

    @field_validator("device", "filename")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and (not _PATH.fullmatch(v) or "/../" in v + "/"):
            raise ValueError(f"{v!r}: an absolute path of letters, digits and '_./+-', no '..'")
        if v is not None and (v != posixpath.normpath(v) or v.startswith("//")):
            # fio compares path strings (its "appears mounted" check): one spelling per file
            raise ValueError(f"{v!r}: write it as {posixpath.normpath('/' + v.lstrip('/'))!r} (no '//', '/./' "
                             "or trailing '/')")
        return v

    @model_validator(mode="after")
    def _one_place(self) -> FleetHost:
        if (self.device is None) == (self.filename is None):
            raise ValueError(f"host {self.name}: give exactly one of device or filename")
        return self

    @property
    def is_unix(self) -> bool:
        return self.address.startswith("/")

    @property
    def local(self) -> bool:
        """Shares this machine's devices (declared, or implied by a unix socket / loopback)."""
        if self.same_machine is not None:
            return self.same_machine
        if self.is_unix:
            return True
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return self.address == "localhost"

    @property
    def path(self) -> str:
        return self.device or self.filename or ""

    def client_arg(self) -> str:
        """The value of `fio --client=`: ip:ADDR,PORT, ip6:ADDR,PORT or sock:PATH."""
        if self.is_unix:
            return f"sock:{self.address}"
        try:
            if ipaddress.ip_address(self.address).version == 6:
                return f"ip6:{self.address},{self.port}"
        except ValueError:
            pass
        return f"ip:{self.address},{self.port}"

    def label(self) -> str:
        where = self.address if self.is_unix else f"{self.address}:{self.port}"
        return f"{self.name} ({where}, {self.path})"


def unique(hosts: list[Any]) -> list[Any]:
    """Validation helper: host names and (address, port) pairs must be unique."""
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise ValueError(f"host names must be unique, got {names}")
    places = [(h.address, h.port) for h in hosts]
    if len(set(places)) != len(places):
        raise ValueError("two hosts name the same address and port")
    return hosts


def load_hosts_file(path: Path) -> list[dict[str, Any]]:
    """The `[[hosts]]` tables of a hosts file (`iolab study fleet-scan --hosts FILE`), each checked
    as a FleetHost. Every problem is a SpecError naming the file and the key (exit status 2)."""
    source = str(path)
    doc = parse_user_toml(read_user_text(path), source)
    extra = sorted(set(doc) - {"hosts"})
    hosts = doc.get("hosts")
    problems: list[tuple[str, str]] = [(k, "unknown key; a hosts file has only [[hosts]] tables") for k in extra]
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, dict) for h in hosts):
        problems.append(("hosts", "expected one or more [[hosts]] tables (name, address, port, device or filename)"))
        raise SpecError(source, problems)
    for i, h in enumerate(hosts):
        try:
            FleetHost(**h)
        except ValidationError as exc:
            for e in exc.errors():
                where = ".".join(str(x) for x in e["loc"])
                key = f"hosts[{i}]" + (f".{where}" if where else "")
                problems.append((key, e["msg"].removeprefix("Value error, ")))
    if not problems:
        try:
            unique([FleetHost(**h) for h in hosts])
        except ValueError as exc:
            problems.append(("hosts", str(exc)))
    if problems:
        raise SpecError(source, problems)
    return [dict(h) for h in hosts]
