"""The one reach into ``http.client``'s private names, in one place (pinned by
tests/unit/test_library_pins.py): ``HTTPConnection._create_connection``, the function
its ``connect()`` calls to open the socket (``socket.create_connection`` by default),
which a connection may replace. The webhook POST replaces it with one that connects to
the addresses it checked and within its deadline (:mod:`.bounded_post`); no public
argument of http.client takes a connecting function."""

import http.client
import socket
from collections.abc import Callable
from typing import Any

Connector = Callable[..., socket.socket]


def connect_with(connection: http.client.HTTPConnection, connector: Connector) -> None:
    """Make ``connection.connect()`` open its socket with ``connector`` (called as
    ``socket.create_connection`` is: address, timeout, source address)."""
    hooked: Any = connection
    hooked._create_connection = connector
