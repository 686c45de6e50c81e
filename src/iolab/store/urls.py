"""How a --db value is shown: a store URL may carry a password, which must never reach a
message, a log, a manifest or a report (the libpq ways to give one, .pgpass, PGPASSWORD and
a service file, keep it out of the URL altogether: docs/store.md)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_USERINFO_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s?#]*):[^\s/?#]*@")  # to the last @
_PARAM_PASSWORD = re.compile(r"((?:^|[?&\s])password=)[^&\s]*", re.IGNORECASE)


def scrub(text: str) -> str:
    """Any text (a command line argument, a message) with every URL password in it replaced by ***:
    for what is not one --db value, e.g. the command line a manifest records."""
    return _PARAM_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1:***@", text))


def shown(ref: str | Path) -> str:
    """A --db value as it may be shown (messages, reports, logs): a password in the URL's user part
    or in a password= parameter becomes ***; a plain path is itself."""
    ref = str(ref)
    if not SCHEME.match(ref):
        return ref
    try:
        parts = urlsplit(ref)
    except ValueError:
        return "(an unparsable URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="/*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
