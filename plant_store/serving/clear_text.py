"""What a starting server says when bearer tokens could reach it in the clear: bound beyond
loopback, with neither TLS of its own, a trusted proxy in front (which terminates TLS), nor
``require_https`` (which refuses plain HTTP). One warning line, so it is seen and not
repeated; the server starts all the same (a private network may be trusted)."""

import logging
from collections.abc import Iterable

from plant_store.config import Config
from plant_store.util.loopback import is_loopback

log = logging.getLogger("plant_store.server")  # the name users filter on


def exposed(config: Config, addresses: Iterable[str], *, tls: bool = False) -> list[str]:
    """The ``addresses`` (those ``host`` resolved to) that take bearer tokens over plain
    HTTP from beyond loopback, as this configuration stands; none when it is safe."""
    if tls or config.trusted_proxy or config.require_https:
        return []
    return [address for address in addresses if not is_loopback(address)]


def warn_if_exposed(config: Config, addresses: Iterable[str], *, tls: bool = False) -> None:
    """Log the one warning line when :func:`exposed` finds addresses."""
    found = exposed(config, addresses, tls=tls)
    if found:
        log.warning("serving plain HTTP on %s, beyond loopback, with no TLS, no trusted_proxy "
                    "and require_https off: bearer tokens and plants travel in the clear and "
                    "can be read on the way (RFC 6750 section 5.3); put a TLS proxy in front "
                    "('plant-store docs tls'), or serve HTTPS itself (tls_certificate), with "
                    "trusted_proxy and require_https = true", " and ".join(sorted(set(found))))
