"""Run the app on waitress until SIGTERM, SIGINT or SIGHUP, finish what is in flight, close
the store."""

import logging
import os
import signal
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
    server = waitress.server.create_server(
        app, _dispatcher=ProbeLaneDispatcher(config.threads, config.url_prefix),
        host=config.host, port=config.port, threads=config.threads, ident="plant-store",
        clear_untrusted_proxy_headers=False,
        # Waitress refuses a body once its Content-Length, or a chunked body's bytes as sent
        # (chunk-size lines too), reach this (its parser compares >=): the limit itself is
        # accepted; one byte more is refused before the app and its token check, unread.
        max_request_body_size=config.max_body_size + 1,
        connection_limit=config.connection_limit, channel_timeout=config.channel_timeout,
        cleanup_interval=min(30, config.channel_timeout),  # how often idle ones are closed
    )
    use_json_errors(server, on_refused)
    return server


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
        # On a stop signal waitress stops accepting, lets each worker finish its request and
        # send the answer (workers write their own answers), waits up to 5 s, and returns.
        server.run()
    finally:
        if worker is not None:
            worker.stop()  # after the last request: their deliveries are in the outbox
        store.close()
        access_log.flush_all()  # the last requests' lines before the closing line
    log.info("plant-store stopped")
