"""A WSGI app on granian as ``plant-store serve --server granian`` sets it up (one worker,
16 blocking threads, WSGI), printing the same "listening on" line as the service.

    python bare_granian.py                            # bare_app.application: the ceiling
    python bare_granian.py 'straightforward:create_app()'   # Falcon + marshmallow

Run from bench/ (the target is imported from there, in the worker, after the fork)."""

import argparse
import importlib
import logging
import socket
import sys
import threading
import time

from granian import Granian
from granian.constants import Interfaces

THREADS = 16


def load(target):
    """``module:name``, or ``module:name()`` for an app factory, called in the worker."""
    module, _, name = target.partition(":")
    app = getattr(importlib.import_module(module), name.removesuffix("()"))
    return app() if name.endswith("()") else app


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="bare_app:application",
                        help="module:name, or module:name() for an app factory")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with socket.socket() as sock:  # a free port (a benchmark's race is harmless)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def announce():
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
                continue
            print(f"{args.target} on granian listening on http://127.0.0.1:{port}",
                  file=sys.stderr, flush=True)
            return

    threading.Thread(target=announce, daemon=True).start()
    Granian(args.target, address="127.0.0.1", port=port,
            interface=Interfaces.WSGI, blocking_threads=THREADS, websockets=False,
            log_dictconfig={"formatters": {}, "handlers": {}, "loggers": {
                "_granian": {"handlers": [], "propagate": True}}},
            ).serve(target_loader=load)


if __name__ == "__main__":
    main()
