"""VmError: the one error every vm/ module raises, so a target catches one type.

It says why QEMU or the guest failed and, where there is one, carries the console tail.
"""

from __future__ import annotations

from iolab.core.errors import IolabError


class VmError(IolabError):
    """QEMU or the guest failed; the message says why and carries the console tail."""
