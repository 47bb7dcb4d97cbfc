"""The words of the forwarding settings, parsed at the bottom so that the settings
(``config``) and the app's forwarded-header handling (``http.forwarded``) read them alike
without one importing the other: the headers a proxy may forward, a list of trusted
proxies, a URL path prefix."""

import ipaddress
import re

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
