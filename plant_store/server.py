"""Run the app on waitress until SIGTERM, SIGINT or SIGHUP, finish what is in flight, close
the store."""

import contextlib
import logging
import os
import select
import signal
import time
import warnings
from collections.abc import Callable, Iterable

import waitress.server
from waitress.server import BaseWSGIServer, MultiSocketServer

from plant_store import access_log, metrics, webhooks
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.probe_lane import ProbeLaneDispatcher
from plant_store.stores import Store
from plant_store.tokens import TokenFile
from plant_store.waitress_errors import use_json_errors

log = logging.getLogger(__name__)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # waitress's run() loop stops on it and lets workers finish


def create_server(
    app: Callable[..., Iterable[bytes]], config: Config,
    on_refused: Callable[[str, str, int], None] | None = None,
) -> BaseWSGIServer | MultiSocketServer:
    """A waitress server for ``app`` with the configured settings (benchmarks reuse it); a
    host that resolves to several addresses gets a MultiSocketServer. ``on_refused(method,
    path, status)``: told of each request waitress answers itself (see waitress_errors)."""
    # The URL prefix and the forwarded headers are the app's (plant_store.forwarded), as
    # under any other server: waitress's own would apply them twice, and by default it
    # removes every forwarded header before the app could read it.
    with warnings.catch_warnings():  # send_bytes is deprecated, and still what it says
        warnings.simplefilter("ignore", DeprecationWarning)
        server = _waitress_server(app, config)
    use_json_errors(server, on_refused)
    return server


def _waitress_server(app: Callable[..., Iterable[bytes]], config: Config,
                     ) -> BaseWSGIServer | MultiSocketServer:
    return waitress.server.create_server(
        app, _dispatcher=ProbeLaneDispatcher(config.threads, config.url_prefix),
        host=config.host, port=config.port, threads=config.threads, ident="plant-store",
        clear_untrusted_proxy_headers=False,
        # Waitress refuses a body once its Content-Length, or a chunked body's bytes as sent
        # (chunk-size lines too), reach this (its parser compares >=): the limit itself is
        # accepted; one byte more is refused before the app and its token check, unread.
        max_request_body_size=config.max_body_size + 1,
        connection_limit=config.connection_limit, channel_timeout=config.channel_timeout,
        cleanup_interval=min(30, config.channel_timeout),  # how often idle ones are closed
        # waitress's default (1) has the request's thread send each part of an answer as
        # it is written (headers, then body: two sends, each under the connection's lock),
        # and while it holds that lock the I/O thread finds the connection writable, can
        # do nothing, and polls again: a busy loop holding the GIL against the very
        # threads it waits for, worst when many answers finish at once (a batch of
        # creates: 1,000 creates/s and 900 us of CPU each on PostgreSQL, against 4,700
        # and 150 us). Buffered up to this, an answer goes out whole, in one send by the
        # I/O thread once its request is done (bare waitress 13,100 -> 17,500 req/s).
        send_bytes=18000,
    )


ANSWERS_AFTER_STOP = 2.0  # seconds a stopping server spends sending buffered answers


def _send_buffered_answers(server: BaseWSGIServer | MultiSocketServer) -> None:
    """Send the answers the last requests left in their connections' buffers: with
    ``send_bytes`` an answer waits there for the I/O thread, which a stop signal ends
    (relies on waitress's socket map and ``HTTPChannel._flush_some``)."""
    until = time.monotonic() + ANSWERS_AFTER_STOP
    channels = getattr(server, "_map", None) or getattr(server, "map", {})
    for channel in list(channels.values()):
        with contextlib.suppress(OSError):
            while getattr(channel, "total_outbufs_len", 0) and time.monotonic() < until:
                if not channel._flush_some(do_close=False):  # the client's window is full
                    select.select([], [channel.socket], [], 0.05)


def _urls(server: BaseWSGIServer | MultiSocketServer, prefix: str) -> list[str]:
    listening = (server.effective_listen if isinstance(server, MultiSocketServer)
                 # BaseWSGIServer sets both in __init__; typeshed's stub leaves them out.
                 else [(server.effective_host, server.effective_port)])  # type: ignore[attr-defined]
    return [f"http://{f'[{host}]' if ':' in host else host}:{port}{prefix}"
            for host, port in listening]


def serve(
    config: Config, store: Store, tokens: TokenFile,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until a stop signal, then close ``store``; ``on_ready(url)`` runs once bound."""
    counted = metrics.for_config(config, store)
    worker = webhooks.start(config, store, counted.attempted if counted else None)
    try:
        app = create_app(config, store=store, tokens=tokens, webhooks=worker, counted=counted)
        server = create_server(app, config,
                               on_refused=counted.refused_by_server if counted else None)
        urls = _urls(server, config.url_prefix)
        if on_ready:
            on_ready(urls[0])
        # The absolute directory: a relative data_dir depends on where the server started.
        log.info("plant-store listening on %s (store: %s, data directory %s, %d threads)",
                 " and ".join(urls), config.store, os.path.abspath(config.data_dir),
                 config.threads)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        # SIGHUP too: waitress reopens no logs, and a closed terminal or a supervisor's HUP
        # must not lose the requests in flight. Ignored (nohup), it stays ignored.
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, _interrupt)
        # On a stop signal waitress stops accepting, lets each worker finish its request (and
        # buffer their answers), waits up to 5 s, and returns; the answers are then sent.
        server.run()
        _send_buffered_answers(server)
    finally:
        if worker is not None:
            worker.stop()  # after the last request: their deliveries are in the outbox
        store.close()
        access_log.flush_all()  # the last requests' lines before the closing line
    log.info("plant-store stopped")
