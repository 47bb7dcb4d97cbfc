"""``plant-store serve``: the HTTP service on waitress (or granian), refusing at once, in
one line, what could only fail later (an address it cannot listen on, a port taken, a
setting the server cannot honour), and the first token shown once."""

import argparse
import errno
import logging
import os
import shlex
import socket

from plant_store import config
from plant_store.cli.grammar import ALL, Commands, command
from plant_store.service import Service
from plant_store.serving import server
from plant_store.stores import StoreError
from plant_store.tokens import TokenFile

FIRST_TOKEN_LABEL = "initial"
log = logging.getLogger("plant_store.cli")  # the name users filter on


def register(commands: Commands) -> None:
    parser = command(commands, "serve", "run the HTTP service on waitress (or granian) "
                                        "until SIGTERM, SIGHUP or Ctrl-C", ALL, handler=run)
    parser.add_argument("--no-first-token", action="store_true",
                        help="make and print no first token when there is no token file (a "
                             "service whose output others read: issue one with 'plant-store "
                             "token add'); the default under systemd's journal")


def run(args: argparse.Namespace, cfg: config.Config) -> int:
    return serve(cfg, TokenFile(cfg.token_file), first_token=not args.no_first_token)


def serve(cfg: config.Config, tokens: TokenFile, first_token: bool = True) -> int:
    # Read when the metrics were imported; granian's workers count there (granian_adapter).
    if cfg.server == "waitress" and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise StoreError("PROMETHEUS_MULTIPROC_DIR is set, but 'plant-store serve' is one "
                         "process and counts its metrics itself: unset it (it is for the "
                         "workers of a pre-fork server)")
    try:  # as waitress will look it up; its own error would be a traceback
        found = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise cfg.blame("host", f"cannot listen on {cfg.host}:{cfg.port}: {reason}") from None
    _check_port(cfg)
    if cfg.server == "waitress" and cfg.workers > 1:
        raise cfg.blame("workers", "waitress is one process; several workers are for "
                                   "server = granian (on store = postgresql)")
    if cfg.server == "waitress" and cfg.tls_certificate:
        raise cfg.blame("tls_certificate", "waitress serves no TLS: serve with server = "
                                           "granian, or terminate TLS at a proxy "
                                           "('plant-store docs tls')")
    server.warn_if_exposed(cfg, [str(address[4][0]) for address in found],
                           tls=bool(cfg.tls_certificate))
    # Under granian each worker process opens the service, after the fork.
    service = Service(cfg, tokens=tokens) if cfg.server == "waitress" else None

    def announce(url: str) -> None:
        """Once listening, make the first token if there is no token file, and show it this
        once. An empty file is kept: its tokens were revoked, and a restart must not undo
        that. Not with --no-first-token, nor when standard output is the journal (systemd
        says so in JOURNAL_STREAM): a token written where others read it is theirs too; say
        how to make one instead."""
        if not first_token or os.environ.get("JOURNAL_STREAM"):
            if not tokens.entries():
                log.warning("no tokens in %s: every API request is refused (401) until one is "
                            "made: plant-store token add --token-file %s --label LABEL",
                            os.path.abspath(tokens.path), shlex.quote(tokens.path))
            return
        token = tokens.add_first(FIRST_TOKEN_LABEL)
        if token is not None:
            print(_first_token_message(token, url, os.path.abspath(tokens.path)), flush=True)

    try:
        if service is None:
            server.serve_granian(cfg, on_ready=announce)
        else:
            server.serve(service, on_ready=announce)  # serve closes it
    except OSError as exc:  # the listening socket: address in use, permission denied
        culprit = "host" if exc.errno == errno.EADDRNOTAVAIL or exc.errno is None else "port"
        raise cfg.blame(culprit, f"cannot listen on {cfg.host}:{cfg.port}: "
                                 f"{exc.strerror or exc}") from None
    return 0


def _check_port(cfg: config.Config) -> None:
    """Refuse a port another process listens on (port, probe_port) before the store is
    opened, so that a start that cannot listen makes no data directory nor lock file in it.
    Bound as waitress binds (SO_REUSEADDR) and let go at once; only "in use" and "denied"
    are told here, anything else is left to the real listen (a race that loses here fails
    there, as before)."""
    for name in ("port", "probe_port"):
        port = getattr(cfg, name)
        if not port:
            continue
        found = socket.getaddrinfo(cfg.host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in found:
            try:
                with socket.socket(family, kind, proto) as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise cfg.blame(name, f"cannot listen on {cfg.host}:{port}: "
                                          f"{exc.strerror}") from None


def _first_token_message(token: str, url: str, path: str) -> str:
    return f"""\
No token was configured, so this one was made (label {FIRST_TOKEN_LABEL!r}; its hash is in
{path}). It is shown only this once:

    {token}

Try it:

    curl -i -X POST {url}/plants \\
      -H 'Authorization: Bearer {token}' \\
      -H 'Content-Type: application/json' \\
      -d '{{"id": 1, "name": "Monstera", "tag": "aroid"}}'
"""
