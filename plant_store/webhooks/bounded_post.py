"""One HTTP POST whose whole exchange (connect, send, the full answer) ends by a deadline.

A socket timeout bounds each operation, not their sum: a subscriber that drips its answer a
byte at a time never lets one read wait long, and holds the sender as long as it likes. The
maintained clients are no better: urllib3's read timeout is the time between consecutive
reads (its ``total`` only hands the reads what connecting left over, still per read), and
httpx's read timeout is per chunk received. So the standard library's http.client is used,
with a watchdog (:class:`~plant_store.util.concurrency.Watchdog`) that shuts the socket down
at the deadline: that wakes a blocked send or read at once, on plain and TLS connections
alike.

Name resolution cannot be woken that way: ``getaddrinfo`` blocks in the C library (a DNS
server that never answers holds it for the resolver's own retries, many seconds) and no
timeout reaches it. So it runs in a thread of its own, waited on until the deadline and then
left behind: a daemon thread, so a lookup that never returns holds neither the delivery nor
the process's exit. Connecting to the addresses found is then bounded by what is left.
"""

import http.client
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from plant_store.logs import escape
from plant_store.util.concurrency import Watchdog
from plant_store.webhooks.http_client_adapter import connect_with

ANSWER_LIMIT = 65536  # bytes of the answer's body read; only its status matters


def _shut_down(connection: http.client.HTTPConnection) -> None:
    """Make every send and read on ``connection``'s socket fail now (a step of the
    watchdog: taken again once connect() returns, for a socket made as it ran)."""
    sock = connection.sock
    if sock is not None:
        with suppress(OSError):  # not connected, or shut down already
            # The TCP socket's own method: under TLS it bypasses the TLS layer's state.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


# getaddrinfo's entries: family, kind, proto, canonical name, socket address.
_Address = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


def resolve(host: str, port: int, seconds: float) -> list[_Address]:
    """``getaddrinfo``'s TCP addresses of ``host``, or TimeoutError after ``seconds``."""
    found: list[list[_Address] | OSError] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=lookup, name="plant-store-resolve", daemon=True)
    thread.start()
    thread.join(max(seconds, 0))
    if not found:
        raise TimeoutError(f"no address for {host} within {seconds:.3g} s")
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


def connector(deadline: float) -> Callable[..., socket.socket]:
    """A ``create_connection`` for http.client (its hook for how a connection connects)
    that resolves and connects by ``deadline`` (time.monotonic()), trying each address the
    name has in turn, as the standard one does."""

    def create_connection(address: tuple[str, int], timeout: float,
                          source_address: tuple[str, int] | None = None) -> socket.socket:
        host, port = address
        error: OSError = TimeoutError(f"no connection to {host} by the deadline")
        for family, kind, proto, _, sockaddr in resolve(host, port,
                                                        deadline - time.monotonic()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(min(timeout, left))
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        raise error

    return create_connection


ERROR_LIMIT = 300  # characters of an error kept


def post(url: str, body: bytes, headers: dict[str, str], timeout: float,
         watchdog: Watchdog | None = None) -> str | None:
    """POST ``body``; None when the subscriber answered 2xx, all of it within ``timeout``
    seconds of the start, else what went wrong. An answer still coming at the deadline is a
    failure, even if it had begun with 2xx. ``watchdog``: the sender's (else one of its own,
    for this POST) shuts the socket down at the deadline."""
    parts = urlsplit(url)
    connection_class = (http.client.HTTPSConnection if parts.scheme == "https"
                        else http.client.HTTPConnection)
    try:  # config refuses such URLs; one owed from before that check fails like a refusal
        if not parts.hostname:  # http.client would raise AttributeError on None
            raise ValueError("no host")
        connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    except ValueError as exc:
        return escape(f"ValueError: {url}: {exc}")[:ERROR_LIMIT]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connect_with(connection, connector(time.monotonic() + timeout))
    own = watchdog is None
    watchdog = watchdog or Watchdog("plant-store-webhook-deadline")
    entry = watchdog.enter(time.monotonic() + timeout, lambda: _shut_down(connection))
    error = None
    try:
        connection.connect()
        watchdog.again(entry)  # a socket made while the deadline's shutdown ran
        connection.request("POST", target, body, headers)
        response = connection.getresponse()
        response.read(ANSWER_LIMIT)
        if not 200 <= response.status < 300:
            error = f"HTTP {response.status} {response.reason}".strip()
    except (OSError, http.client.HTTPException) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        fired = watchdog.exit(entry)  # from here the watchdog never touches the socket
        connection.close()
        if own:
            watchdog.close()
    if fired:
        return f"TimeoutError: no complete answer within {timeout:g} s"
    # The subscriber chose part of it (a reason phrase, a status line): it goes in log lines
    # and in 'webhooks list' rows, so one line, escaped, and short.
    return None if error is None else escape(error)[:ERROR_LIMIT]
