"""The ceiling on granian: ``bare_app.application`` (reads the body, answers fixed JSON)
served by granian as ``plant-store serve --server granian`` sets it up (one worker, 16
blocking threads, WSGI), printing the same "listening on" line as the service."""

import logging
import socket
import sys
import threading
import time

from granian import Granian
from granian.constants import Interfaces

THREADS = 16


def load(target):
    from bare_app import application

    return application


def main():
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
            print(f"bare granian listening on http://127.0.0.1:{port}", file=sys.stderr,
                  flush=True)
            return

    threading.Thread(target=announce, daemon=True).start()
    Granian("bare_app:application", address="127.0.0.1", port=port,
            interface=Interfaces.WSGI, blocking_threads=THREADS, websockets=False,
            log_dictconfig={"formatters": {}, "handlers": {}, "loggers": {
                "_granian": {"handlers": [], "propagate": True}}},
            ).serve(target_loader=load)


if __name__ == "__main__":
    main()
