"""How a --db value is read and shown: a store URL may carry a password, which must never reach a
message, a log, a manifest, a report or a stored row (the libpq ways to give one, .pgpass,
PGPASSWORD and a service file, keep it out of the URL altogether: docs/store.md).

A PostgreSQL URL is parsed by libpq itself (`psycopg.conninfo.conninfo_to_dict`), never by a
regular expression or `urllib`: libpq takes `#`, `?`, `:` and spaces inside a password where a URL
grammar would end the password early, and what iolab shows must be what libpq reads. An
unencoded `@` or `/` in a password makes libpq read the rest of it as a host, a port or a
database name: such a URL is refused as unparsable (no server has such a name), so that rest
is never shown either. The URL shown is rebuilt from the parsed parameters without the password (and without
`sslpassword`), so nothing of the password can survive by construction. A URL libpq cannot
parse is described by libpq's reason up to the first quoted token (libpq's message quotes the
offending text, sometimes the whole URL with its password): the URL itself is never echoed.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote, urlencode

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
POSTGRES_SCHEMES = ("postgresql", "postgres")
SECRET_PARAMS = ("password", "sslpassword")  # libpq parameters whose values are secrets
HIDDEN = "***"
# a URL of any scheme inside a command-line argument: from its scheme to the end of the argument
_URL_IN_ARG = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# key=value conninfo secrets (libpq's other syntax: password='a b' or password=x)
_KV_SECRET = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)


class UnparsableURL(ValueError):
    """libpq cannot parse the URL; `reason` is libpq's wording without the text it quoted."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def is_postgres(ref: str) -> bool:
    m = SCHEME.match(ref)
    return bool(m and m.group(1).lower() in POSTGRES_SCHEMES)


def parse(ref: str) -> dict[str, str]:
    """A PostgreSQL URL's parameters as libpq reads them (password included: for connecting and
    for scrubbing, never for showing). UnparsableURL when libpq refuses it."""
    from psycopg import Error
    from psycopg.conninfo import conninfo_to_dict

    if "\x00" in ref:
        raise UnparsableURL("it contains a NUL byte")
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(ref).items() if v is not None}
    except Error as exc:
        raise UnparsableURL(_reason(str(exc))) from None
    except UnicodeError:  # a %XX that decodes to bytes that are not UTF-8
        raise UnparsableURL("it decodes to bytes that are not UTF-8 (a '%' inside a password must be written %25)") \
            from None
    # libpq reads an unencoded '@' or '/' in a password as part of the host, port or database:
    # shown, those would show the rest of the password, and no server has such a name anyway
    if any("@" in params.get(k, "") for k in ("host", "hostaddr", "dbname")):
        raise UnparsableURL("an '@' inside a user name or password must be written %40")
    if not re.fullmatch(r"[0-9,]*", params.get("port", "")):
        raise UnparsableURL("the port is not a number (a '/' inside a password must be written %2F)")
    return params


def _reason(message: str) -> str:
    """libpq's parse error up to the first quote (what follows quotes the URL, or part of it)."""
    head = message.split('"', 1)[0].split("\n", 1)[0].strip().rstrip(":").strip()
    return head if len(head) >= 8 else "libpq cannot parse it"


def secrets_of(ref: str) -> list[str]:
    """Every form in which `ref`'s secrets could appear in a text: as libpq decoded them and as
    written in the URL (percent-encoded). Empty for a path or a URL without a password."""
    if not is_postgres(ref):
        return []
    found = _raw_secrets(ref)
    try:
        params = parse(ref)
    except UnparsableURL:
        params = {}
    for value in [*(params.get(key) for key in SECRET_PARAMS), *found]:
        if value:
            found += [value, unquote(value), quote(value, safe=""), quote(value, safe="/:@"), quote(value)]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _raw_secrets(ref: str) -> list[str]:
    """What a password may be in the URL as written, whether libpq parses it or not: everything
    between the user name's ':' and the last '@', and every `password=` value (a superset of the
    password is scrubbed as well as the password)."""
    rest = SCHEME.sub("", ref, count=1)
    found = []
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        if ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    found += [m.group(1) for m in re.finditer(r"(?:^|[?&\s])(?:ssl)?password=([^&]*)", rest, re.IGNORECASE)]
    return found


def shown(ref: str | Path) -> str:
    """A --db value as it may be shown (messages, reports, logs, manifests): a path is itself; a
    PostgreSQL URL is rebuilt from libpq's reading of it without its secrets (a password given
    shows as `***`); a URL libpq cannot parse, or of a scheme iolab does not know, is described
    without being echoed."""
    ref = str(ref)
    m = SCHEME.match(ref)
    if not m:
        return ref
    scheme = m.group(1).lower()
    if scheme == "sqlite":
        return ref  # sqlite:///a/path: a path, no secret
    if scheme not in POSTGRES_SCHEMES:  # a grammar iolab does not know: shown only if it cannot hold a password
        secretless = "@" not in ref and "password" not in ref.lower() and not any(c.isspace() for c in ref)
        return ref if secretless else f"{scheme}://(the rest not shown: it may hold a password)"
    try:
        params = parse(ref)
    except UnparsableURL as exc:
        return f"{scheme}://(a URL libpq cannot parse: {exc.reason})"
    return _rebuilt(scheme, params)


def _rebuilt(scheme: str, params: dict[str, str]) -> str:
    """postgresql://user[:***]@host:port/dbname?rest, from parsed parameters (secrets left out)."""
    rest = dict(params)
    had_secret = any(rest.pop(k, None) for k in SECRET_PARAMS)
    user, host, port, dbname = (rest.pop(k, None) for k in ("user", "host", "port", "dbname"))
    netloc = ""
    if user or had_secret:
        netloc = quote(user or "", safe="") + (f":{HIDDEN}" if had_secret else "") + "@"
    query: dict[str, str] = {}
    simple_host = host is not None and host != "" and not host.startswith("/") and "," not in host
    if host and simple_host:
        netloc += f"[{host}]" if ":" in host else quote(host, safe="")
    elif host:
        query["host"] = host
    if port:
        if simple_host and "," not in port:
            netloc += f":{port}"
        else:
            query["port"] = port
    query.update(sorted(rest.items()))
    path = "/" + quote(dbname, safe="") if dbname else "/"
    return f"{scheme}://{netloc}{path}" + (f"?{urlencode(query, safe='/,')}" if query else "")


def scrub(arg: str) -> str:
    """One command-line argument as it may be recorded (a manifest's command line reaches the
    team store and the reports): a URL in it, from its scheme to the end of the argument (an
    argument is one word, spaces in a password included), is replaced by `shown(URL)`; a
    key=value `password=` is hidden too."""
    m = _URL_IN_ARG.search(arg)
    if m:
        arg = arg[:m.start()] + shown(arg[m.start():])
    return _KV_SECRET.sub(lambda k: k.group(1) + HIDDEN, arg)


def scrub_message(message: str, ref: str) -> str:
    """A driver message about `ref` with every form of its secrets (and the URL as given) removed,
    on one line: libpq's connection errors name the host and the user, never meant the password,
    and this makes sure of it. A server's CONTEXT lines (where in a PL/pgSQL function it was
    raised) are left out: the message and its HINT say what to do."""
    message = message.split("\nCONTEXT:", 1)[0]
    for secret in [ref, *secrets_of(ref)]:
        message = message.replace(secret, HIDDEN)
    return " ".join(message.split())[:500]
