"""Forwarded headers and the URL prefix, in one place: the settings' words (parsed for
:mod:`plant_store.config`, which only declares the settings), which peers are trusted, and
:class:`ForwardedHeaders`, the WSGI wrapper that applies them to the environ before the app
sees it (the shape of werkzeug's ``ProxyFix``). The app never learns a proxy was there, so
``plant-store serve``, granian, gunicorn, uWSGI and a host application behave alike.

Invariants:

- Forwarded headers are read only when the peer (``REMOTE_ADDR``) is a trusted proxy. Every
  forwarded header that is not read (an untrusted peer, a header not in
  ``trusted_proxy_headers``) is removed from the environ, so nothing downstream reads it.
- Of each header's comma-separated hops, only the one ``count`` from the right is believed:
  the hop the nearest trusted proxy wrote; what a client wrote sits to its left. A header with
  fewer hops is ignored whole.
- A value that does not parse (an address that is not one, a scheme other than http or
  https, a host or a prefix with characters no URL has there) is ignored; the others apply.
- ``Forwarded`` (RFC 7239), when trusted and sent, replaces ``X-Forwarded-For``, ``-Proto``
  and ``-Host``; ``X-Forwarded-Port`` and ``-Prefix``, which it has no words for, still apply.
- The prefix a request arrives under is moved from ``PATH_INFO`` to ``SCRIPT_NAME``: a path
  under ``url_prefix`` loses it, so the URLs the service emits carry it. A path outside it
  (a probe sent to the service directly) is served as it came, its URLs without the prefix,
  and logged as sent. A trusted ``X-Forwarded-Prefix`` (a proxy that stripped one) goes
  before both.
"""

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import falcon

__all__ = ["HEADERS", "ForwardedHeaders", "base_url", "header_names", "networks", "prefix",
           "proxies", "url_prefix"]

# The environ keys of the headers a proxy may forward, by their names in the settings.
HEADERS = {
    "x-forwarded-for": "HTTP_X_FORWARDED_FOR",
    "x-forwarded-proto": "HTTP_X_FORWARDED_PROTO",
    "x-forwarded-host": "HTTP_X_FORWARDED_HOST",
    "x-forwarded-port": "HTTP_X_FORWARDED_PORT",
    "x-forwarded-prefix": "HTTP_X_FORWARDED_PREFIX",
    "x-forwarded-by": "HTTP_X_FORWARDED_BY",  # accepted for waitress's sake; says nothing used
    "forwarded": "HTTP_FORWARDED",
}
_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@-]+")  # a path segment, unencoded
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?")
_SCOPE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an IPv6 zone: an interface's name or number
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# Forwarded's pairs: a token, '=', and a token or a quoted string (RFC 7239, section 4).
_PAIR = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)=([!#$%&\'*+.^_`|~0-9A-Za-z-:\[\]]+'
                   r'|"(?:[^"\\]|\\.)*")\s*')


# The settings' words: each a parser of Config's, raising ValueError with what is wanted.

def proxies(text: str) -> str:
    """``trusted_proxy``: IP addresses and networks, or '*'; kept as text, parsed again by
    :class:`ForwardedHeaders`."""
    try:
        networks(text)
    except ValueError:
        raise ValueError("must be the proxies' IP addresses or networks (127.0.0.1 "
                         "10.0.0.0/8), space-separated, or *") from None
    return " ".join(text.replace(",", " ").split())


def header_names(text: str) -> str:
    """``trusted_proxy_headers``: names from :data:`HEADERS`, space-separated."""
    names = text.lower().replace(",", " ").split()
    unknown = sorted(set(names) - set(HEADERS))
    if unknown:
        raise ValueError(f"unknown header {unknown[0]}; choose from {' '.join(HEADERS)}")
    return " ".join(names)


def url_prefix(text: str) -> str:
    """``url_prefix``: a path prefix (:func:`prefix`), or ValueError."""
    parsed = prefix(text)
    if parsed is None:
        raise ValueError("must be a path that starts with /, of plain segments (letters, "
                         "digits and -._~!$&'()*+,;=:@; no '.' or '..', no %-escapes)")
    return parsed


def networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None:
    """The proxies ``trusted_proxy`` names: None for '*' (any peer), else their networks
    (an address is a network of one). Raises ValueError for anything else."""
    if text.strip() == "*":
        return None
    return tuple(ipaddress.ip_network(item, strict=False)
                 for item in text.replace(",", " ").split())


def prefix(text: str) -> str | None:
    """A URL path prefix without its trailing slash ('' for the root), or None when ``text``
    is not one: only plain segments, none of them '.' or '..'."""
    text = text.strip().rstrip("/")
    if not text:
        return ""
    segments = text.split("/")
    if segments[0] or any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments[1:]):
        return None
    return text


class ForwardedHeaders:
    """Wraps any WSGI app (``app``, kept as ``.app``): each request's environ is rewritten
    as the settings say (:meth:`rewrite`: the module's invariants), then handed to it.

    ``trusted``, ``headers``, ``count`` and ``url_prefix`` are the settings
    ``trusted_proxy``, ``trusted_proxy_headers`` (as names), ``trusted_proxy_count`` and
    ``url_prefix``."""

    def __init__(self, app: Callable[..., Iterable[bytes]], trusted: str = "",
                 headers: Iterable[str] = (), count: int = 1, url_prefix: str = "") -> None:
        self.app = app
        self._trusted_networks = networks(trusted) if trusted else ()
        self._read = {HEADERS[name] for name in headers} if trusted else set()
        self._drop = tuple(set(HEADERS.values()) - self._read)
        self._count = count
        self._prefix = url_prefix
        self._prefix_slash = url_prefix + "/"
        self._trusted = functools.lru_cache(maxsize=1024)(self._is_trusted)  # peers repeat

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.rewrite(environ)
        return self.app(environ, start_response)

    def rewrite(self, environ: dict[str, Any]) -> None:
        """What a trusted proxy says of the client, and the prefix, applied to ``environ``."""
        for key in self._drop:
            environ.pop(key, None)
        if self._read:
            if self._trusted(environ.get("REMOTE_ADDR", "")):
                self._believe(environ)
            else:
                for key in self._read:
                    environ.pop(key, None)
        if self._prefix:
            path = environ.get("PATH_INFO", "")
            if path == self._prefix or path.startswith(self._prefix_slash):
                environ["PATH_INFO"] = path[len(self._prefix):]
                environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + self._prefix

    def _is_trusted(self, peer: str) -> bool:
        if self._trusted_networks is None:
            return True
        address = _address(peer)
        return address is not None and any(
            address in network for network in self._trusted_networks)

    def _hop(self, environ: dict[str, Any], key: str) -> str | None:
        """The hop of header ``key`` that the nearest trusted proxies wrote, or None."""
        if key not in self._read:
            return None
        value = environ.get(key)
        if value is None:
            return None
        # X-Forwarded-* have no quoted strings: a client's '"' must not swallow the hop
        # an appending proxy added after it.
        hops = _split(value) if key == "HTTP_FORWARDED" else value.split(",")
        return hops[-self._count].strip() if len(hops) >= self._count else None

    def _believe(self, environ: dict[str, Any]) -> None:
        element = self._hop(environ, "HTTP_FORWARDED")
        if element is not None:
            said = _pairs(element)
            client, scheme, host = said.get("for"), said.get("proto"), said.get("host")
        else:
            client = self._hop(environ, "HTTP_X_FORWARDED_FOR")
            scheme = self._hop(environ, "HTTP_X_FORWARDED_PROTO")
            host = self._hop(environ, "HTTP_X_FORWARDED_HOST")
        if client is not None and (address := _address(client)) is not None:
            environ["REMOTE_ADDR"] = str(address)
        if scheme is not None and scheme.lower() in _DEFAULT_PORTS:
            environ["wsgi.url_scheme"] = scheme = scheme.lower()
        else:
            scheme = environ.get("wsgi.url_scheme", "http")
        if host is not None and _HOST.fullmatch(host):
            environ["HTTP_HOST"] = host
        port = self._hop(environ, "HTTP_X_FORWARDED_PORT")
        if port is not None and port.isascii() and port.isdigit() and 0 < int(port) < 65536:
            port = str(int(port))
            name = _HOST.fullmatch(environ.get("HTTP_HOST", "")) or None
            if name is not None:
                default = _DEFAULT_PORTS.get(scheme) == port
                environ["HTTP_HOST"] = name.group(1) + ("" if default else f":{port}")
            environ["SERVER_PORT"] = port
        forwarded_prefix = self._hop(environ, "HTTP_X_FORWARDED_PREFIX")
        if forwarded_prefix is not None and (forwarded_prefix := prefix(forwarded_prefix)):
            environ["SCRIPT_NAME"] = forwarded_prefix + environ.get("SCRIPT_NAME", "")


def base_url(req: "falcon.Request") -> str:
    """Where the client reached the service (``req.prefix``), for the URLs the service
    emits; when the ``Host`` a client sent is no host (``evil.example/x?``, empty), the
    server's own name and port instead, so no URL carries what a client made up there."""
    host = req.env.get("HTTP_HOST")
    if host is None or _HOST.fullmatch(host):
        return req.prefix
    env = req.env
    return f"{req.scheme}://{env.get('SERVER_NAME', 'localhost')}:{env.get('SERVER_PORT', '80')}" \
        f"{req.root_path}"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as proxies write it: bare, ``[v6]``, ``[v6]:port`` or ``v4:port``, quoted
    or not, an IPv4-mapped IPv6 address as its IPv4 address; None for anything else
    ('unknown', an obfuscated ``_name``)."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    scope = text.partition("%")[2]
    if scope and not _SCOPE.fullmatch(scope):  # ipaddress takes any text as a scope id
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # A dual-stack listener (granian on ::) sees an IPv4 peer as ::ffff:a.b.c.d: the same
    # peer, so the same trust (the hostile pass on issue 51).
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _split(value: str, separator: str = ",") -> list[str]:
    """A header's comma-separated hops (or an element's ';'-separated pairs), separators
    inside quoted strings kept."""
    if '"' not in value:
        return value.split(separator)
    hops: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            hops.append("".join(current))
            current = []
            continue
        current.append(char)
    if quoted:  # a quote left open (a client's, since proxies write whole elements): the
        # separators after it are real, so the elements appended after it stay whole
        hops.extend("".join(current).split(separator))
    else:
        hops.append("".join(current))
    return hops


def _pairs(element: str) -> dict[str, str]:
    """A ``Forwarded`` element's parameters (names in lower case, quotes removed); none at
    all when one of them does not parse, or a name repeats: such an element says nothing."""
    said: dict[str, str] = {}
    for pair in _split(element, ";"):
        match = _PAIR.fullmatch(pair)
        if match is None or match.group(1).lower() in said:
            return {}
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        said[match.group(1).lower()] = value
    return said

