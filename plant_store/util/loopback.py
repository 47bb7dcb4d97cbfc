"""Which hosts and URLs stay on this machine: where plain HTTP exposes nothing on the way.

Loopback means an IP literal in 127.0.0.0/8 or ::1, or the name ``localhost`` (and names
under ``.localhost``, RFC 6761); any other name counts as beyond loopback: it is not
resolved, as what it resolves to may change.
"""

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, ``[v6]``, or a name) is this machine only."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.partition("%")[0]).is_loopback
    except ValueError:
        return False


def clear_text_urls(urls: Iterable[str]) -> list[str]:
    """The ``http://`` URLs of ``urls`` whose host is beyond loopback."""
    return [url for url in urls
            if urlsplit(url).scheme.lower() == "http"
            and not is_loopback(urlsplit(url).hostname or "")]
