"""Run the service on waitress (or on granian: :func:`serve_granian`) until SIGTERM, SIGINT
or SIGHUP, finish what is in flight, close it.

And what a starting server, either one, says when bearer tokens could reach it in the clear
(:func:`warn_if_exposed`): bound beyond loopback, with neither TLS of its own, a trusted
proxy in front (which terminates TLS), nor ``require_https`` (which refuses plain HTTP).
One warning line, so it is seen and not repeated; the server starts all the same (a
private network may be trusted)."""

import contextlib
import logging
import os
import resource
import signal
from collections.abc import Callable, Iterable

from plant_store import __version__, logs
from plant_store.config import Config
from plant_store.http import access_log, auth
from plant_store.http.auth import Tokens
from plant_store.service import Service
from plant_store.serving import probes, waitress_adapter, waitress_loop
from plant_store.serving.probes import ProbeLaneDispatcher
from plant_store.serving.waitress_adapter import Server
from plant_store.util.loopback import is_loopback

log = logging.getLogger("plant_store.server")  # the name users filter on

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _interrupt(signum: int, frame: object) -> None:
    """The first stop signal ends the I/O loop wherever it waits; the drain that follows
    (waitress_loop.run_until_stopped) is bounded by itself, so a second one is ignored,
    not let to abort it half-way."""
    for other in STOP_SIGNALS:
        if signal.getsignal(other) is _interrupt:
            signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt


def create_server(
    app: Callable[..., Iterable[bytes]], config: Config,
    on_refused: Callable[[str, str, int], None] | None = None, tokens: Tokens | None = None,
) -> Server:
    """A waitress server for ``app`` with the configured settings (benchmarks reuse it); a
    host that resolves to several addresses gets a MultiSocketServer. ``on_refused(method,
    path, status)``: told of each request waitress answers itself (in the Error shape, see
    waitress_adapter); ``tokens``: only a request with one of them is invited to send its
    body (``Expect: 100-continue``)."""
    # The URL prefix and the forwarded headers are the app's (plant_store.util.forwarded), as
    # under any other server: waitress's own would apply them twice, and by default it
    # removes every forwarded header before the app could read it.
    return waitress_adapter.create_server(
        app, ProbeLaneDispatcher(config.threads, config.url_prefix),
        # A body of max_body_size is accepted; one byte more is refused as it arrives,
        # before the app and its token check, unread.
        max_body_size=config.max_body_size, request_timeout=config.request_timeout,
        min_send_rate=config.min_send_rate, send_rate_window=config.send_rate_window,
        on_refused=on_refused, may_continue=auth.verifier(tokens) if tokens else None,
        host=config.host, port=config.port, threads=config.threads, ident="plant-store",
        clear_untrusted_proxy_headers=False,
        connection_limit=config.connection_limit, channel_timeout=config.channel_timeout,
        cleanup_interval=1,  # how often late and idle connections are looked for
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


STOP_GRACE = 5.0  # seconds a stopping server gives its requests to finish and be answered


def _raise_descriptor_limit() -> None:
    """Let the process open as many descriptors as the system allows it (systemd's soft
    limit is 1024): connections and the answers waitress spills to temporary files each
    take one, and waitress's poll() loop watches any number."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _crowded(server: Server, config: Config) -> str | None:
    """Why the probe port's /ready says not ready while every connection is held: an
    orchestrator should send new clients elsewhere, as none gets in here."""
    if not waitress_adapter.all_slots_held(server):
        return None
    return (f"Every connection is held (connection_limit={config.connection_limit}) and "
            "none could be freed: new clients cannot get in.")


def _urls(server: Server, prefix: str) -> list[str]:
    return [f"http://{f'[{host}]' if ':' in host else host}:{port}{prefix}"
            for host, port in waitress_adapter.listening(server)]


def serve(service: Service, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``service`` until a stop signal, then close it; ``on_ready(url)`` runs once
    bound. The log's last lines get DRAIN_TIMEOUT to reach stderr, not longer: a reader
    that stalls cannot hold the stop."""
    try:
        try:
            _serve(service, on_ready)
        finally:
            service.close()  # after the last request: their deliveries are in the outbox
            access_log.flush_all()  # the last requests' lines before the closing line
        log.info("plant-store stopped")
    finally:
        logs.drain()


def serve_granian(config: Config, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve on granian (``server = granian``) until a stop signal: its worker processes
    each open the service after the fork, and close it once their requests are answered
    (:mod:`plant_store.serving.granian_adapter`); ``on_ready(url)`` runs once one listens."""
    from plant_store.serving import granian_adapter  # granian is an extra

    _raise_descriptor_limit()  # the workers inherit it: it bounds their connections
    try:
        granian_adapter.serve(config, on_ready, STOP_GRACE)
    finally:
        access_log.flush_all()
    log.info("plant-store stopped")


def _serve(service: Service, on_ready: Callable[[str], None] | None) -> None:
    config = service.config
    server = create_server(service.app, config, on_refused=service.metrics.refused_by_server,
                           tokens=service.tokens)
    _raise_descriptor_limit()
    if config.probe_port:  # probes that no client's connections can crowd out
        try:
            listener = probes.listen(config.host, config.probe_port)
        except OSError as exc:
            raise config.blame("probe_port", f"cannot listen on {config.host}:"
                                             f"{config.probe_port}: {exc.strerror}") from None
        probes.serve(service.app, listener, unready=lambda: _crowded(server, config))
    urls = _urls(server, config.url_prefix)
    if on_ready:
        on_ready(urls[0])
    # The absolute directory: a relative data_dir depends on where the server started.
    log.info("plant-store listening on %s (version %s, store: %s, data directory %s, "
             "%d threads)", " and ".join(urls), __version__, config.store,
             os.path.abspath(config.data_dir), config.threads)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    # SIGHUP too: waitress reopens no logs, and a closed terminal or a supervisor's HUP
    # must not lose the requests in flight. Ignored (nohup), it stays ignored.
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _interrupt)
    # Then a drain: the answers in flight are still sent, for at most STOP_GRACE.
    waitress_loop.run_until_stopped(server, STOP_GRACE)


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
