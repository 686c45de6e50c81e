"""Small C helpers for measurements Python or fio cannot make (e.g. R2's write modes).

Sources ship in this package; `helper_path(name)` compiles one on first use.
"""

from __future__ import annotations

from iolab.native.build import GUEST_DIR, available, build_all, helper_for, helper_path, helper_stdout

__all__ = ["GUEST_DIR", "available", "build_all", "helper_for", "helper_path", "helper_stdout"]
