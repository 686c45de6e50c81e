"""iperf3 TCP throughput between a guest and its host, or between two guests (R5's network part).

Where the two ends run depends on the placement:

* a guest with `network = "user"`: the host is 10.0.2.2 from inside the guest (slirp maps it
  to the host's loopback). guest_to_host: client in the guest, server on the host;
  host_to_guest: the same with `-R` (the server sends); guest_to_guest: the server runs in
  the target's peer guest (`net_peer = true`), reached through its host port forward.
* the host (the baseline): client and server on the host's loopback, for every direction.

Both ends on the host run confined like every trial process (core/confine.py: they can write
only their work dirs), but in the host's network namespace (ExecRequest.network): the
confinement's private one would give each its own 127.0.0.1, and QEMU's user network (slirp,
which shares the host's) reaches the host server only there.

The rate is what the receiving end got (end.sum_received), so a sender's buffered bytes
never count. The server is started first and the client only once the server's port is
listening, so no connection attempt is wasted on a one-off (-1) server.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.cgroups.executor import HostExecutor
from iolab.core.confine import Confinement
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult, Executor, Running
from iolab.core.metrics import Metric
from iolab.core.net import free_port
from iolab.core.units import parse_duration
from iolab.targets.base import Capability, Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult

Direction = Literal["guest_to_host", "host_to_guest", "guest_to_guest"]
LISTEN_WAIT_S = 60.0  # a server in a TCG guest can take seconds to start


class Iperf3Params(WorkloadParams):
    kind: Literal["iperf3"] = "iperf3"
    direction: Direction = "guest_to_host"
    time: float = Field(10.0, gt=0, le=3600, description="seconds measured (R5: 60)")
    omit: float = Field(1.0, ge=0, le=60, description="seconds of TCP slow start left out at the start")
    parallel: int = Field(1, ge=1, le=32, description="parallel TCP streams")

    @field_validator("time", "omit", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)


class Iperf3Workload(Workload):
    kind: ClassVar[str] = "iperf3"
    Params: ClassVar[type[WorkloadParams]] = Iperf3Params
    main_metric = "mbit_s"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("mbit_s", "Mbit/s", "higher", "TCP rate the receiver got over the fixed time (10^6 bits/s)"),
        Metric("retransmits", "segments", "lower", "TCP retransmits the sender counted"),
    )
    params: Iperf3Params

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """A network path to the host; guest_to_guest also a second machine (on the host: loopback)."""
        p = Iperf3Params(**workload)
        caps: set[Capability] = {"network", "network_peer"} if p.direction == "guest_to_guest" else {"network"}
        return Needs(apps=frozenset({"iperf3"}), capabilities=frozenset(caps),
                     why={"capability:network": "its server runs on the host",
                          "capability:network_peer": "guest_to_guest runs its server in a second guest"})

    def estimate_seconds(self) -> float:
        return self.params.time + self.params.omit + 5

    def describe(self) -> list[str]:
        p = self.params
        return [f"workload iperf3: TCP {p.direction.replace('_', ' ')}, {p.time:g} s "
                f"(+{p.omit:g} s omitted), {p.parallel} stream(s); on the host: loopback"]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        plan = self._plan(placement)
        # the host side is the trial's too, and confined: it writes nothing but its work dir
        host = HostExecutor(cgroup=placement.trial_cgroup, confinement=Confinement())
        try:
            return self._measure(plan, placement.executor, host, timeout_s)
        finally:
            host.close()

    # ------------------------------------------------------------ where each end runs

    def _plan(self, placement: Placement) -> dict[str, Any]:
        """{server: "host"|"peer"|"self", connect: (addr, port), reverse: bool, flags: [...]}."""
        p = self.params
        if placement.executor.name == "host":
            return {"server": "self", "addr": "127.0.0.1", "reverse": p.direction == "host_to_guest",
                    "flags": ["loopback: client and server both on the host (the baseline, no VM)"]}
        net = placement.extras.get("net")
        if not net:
            raise TrialFailed("iperf3 in a guest needs a network path to the host; this guest has none "
                              '(set network = "user" on the qemu target)')
        if p.direction == "guest_to_guest":
            peer = placement.extras.get("peer")
            if not peer:
                raise TrialFailed("guest_to_guest needs a second guest on that network; this target has none")
            return {"server": "peer", "addr": net["host_addr"], "port": peer["forward_port"],
                    "peer": peer, "reverse": False, "flags": []}
        return {"server": "host", "addr": net["host_addr"], "reverse": p.direction == "host_to_guest",
                "flags": []}

    def _measure(self, plan: dict[str, Any], own: Executor, host: HostExecutor, timeout_s: float) -> WorkloadResult:
        """Server first (host, or the peer guest), then the client where the placement runs."""
        p = self.params
        deadline = time.monotonic() + timeout_s
        if plan["server"] == "peer":
            server_ex: Executor = plan["peer"]["executor"]
            listen_port, connect_port = plan["peer"]["server_port"], plan["peer"]["forward_port"]
            bind: list[str] = []
        else:
            server_ex = host
            listen_port = connect_port = free_port()
            bind = ["-B", "127.0.0.1"]
        server = server_ex.spawn(ExecRequest(["iperf3", "-s", "-1", *bind, "-p", str(listen_port)],
                                             timeout_s=timeout_s, network=True))
        try:
            _wait_listening(server_ex, server, listen_port, min(LISTEN_WAIT_S, timeout_s))
            argv = ["iperf3", "-c", plan["addr"], "-p", str(connect_port), "-t", f"{p.time:g}",
                    "-O", f"{p.omit:g}", "-P", str(p.parallel), "-J", *(["-R"] if plan["reverse"] else [])]
            res = own.run(ExecRequest(argv, timeout_s=max(5.0, deadline - time.monotonic()), network=True))
        finally:
            # and reap it: wait() removes the server's cgroup leaf, which outside a trial (a
            # standalone host executor) sits at the hierarchy roots and would outlive the run
            server.kill()
            server.wait()
        data = _parse(res)
        metrics = summary_metrics(data)
        return WorkloadResult(metrics=metrics, raw=data, job_text=" ".join(argv), flags=plan["flags"])


def _wait_listening(executor: Executor, server: Running, port: int, wait_s: float) -> None:
    """Poll /proc/net/tcp{,6} where the server runs until `port` is in LISTEN state."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        res = executor.run(ExecRequest(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout_s=30, network=True))
        if port in listening_ports(res.stdout):
            return
        time.sleep(0.2)
    server.kill()
    out = server.wait()
    raise TrialFailed(f"iperf3 server did not listen on port {port} within {wait_s:.0f} s: {out.tail()}")


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports in LISTEN state (st == 0A) in /proc/net/tcp or tcp6 text."""
    ports = set()
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 3 and ":" in fields[1] and fields[3] == "0A":
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _parse(res: ExecResult) -> dict[str, Any]:
    if res.timed_out:
        raise TrialFailed(f"iperf3 client timed out after {res.wall_s:.0f} s")
    try:
        data = json.loads(res.stdout)
    except ValueError:
        raise TrialFailed(f"iperf3 gave no JSON (rc {res.returncode}): {res.tail()}") from None
    if data.get("error"):
        raise TrialFailed(f"iperf3: {data['error']}")
    return data


def summary_metrics(data: dict[str, Any]) -> dict[str, float]:
    """Receiver-side rate in Mbit/s (10^6 bits) and the sender's TCP retransmits."""
    end = data.get("end") or {}
    received = end.get("sum_received") or {}
    if "bits_per_second" not in received:
        raise TrialFailed("iperf3 JSON has no end.sum_received.bits_per_second")
    sent = end.get("sum_sent") or {}
    return {"mbit_s": received["bits_per_second"] / 1e6, "retransmits": float(sent.get("retransmits", 0))}
