"""A webhook subscriber on loopback that records what it gets and fails when told to."""

import http.server
import itertools
import socket
import threading
import time

from standardwebhooks import Webhook, WebhookVerificationError

SECRET = "whsec_nTiAg8DZuzBgWGAlOQ478TUxK0wvzMHF9etnI/fAmW0="  # from 'plant-store webhooks secret'


def verified(headers, body, secret=SECRET):
    """What a receiver does: the official standardwebhooks library's verdict (the signature
    of id, timestamp and raw body; the timestamp within its 5 minutes of now). A malformed
    webhook-signature makes it raise ValueError rather than its own error."""
    try:
        Webhook(secret).verify(body, headers, json_parse=False)
    except (WebhookVerificationError, ValueError):
        return False
    return True


class Receiver:
    """``answers``: statuses for the first requests, in order (then ``then``); ``delay``:
    seconds to wait before answering."""

    def __init__(self, answers=(), then=200, delay=0.0, port=0):
        self.answers, self.then, self.delay = list(answers), then, delay
        self.requests = []  # (headers, body, status given)
        self.arrivals = 0  # requests read, answered or not yet
        self.most_at_once = 0  # the most requests read and not yet answered at one time
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.arrivals += 1
                    waiting = receiver.arrivals - len(receiver.requests)
                    receiver.most_at_once = max(receiver.most_at_once, waiting)
                time.sleep(receiver.delay)
                with receiver.lock:
                    status = receiver.answers.pop(0) if receiver.answers else receiver.then
                    receiver.requests.append((dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self):
        """(headers, body) of the requests answered 2xx."""
        with self.lock:
            return [(h, b) for h, b, status in self.requests if 200 <= status < 300]

    def wait_for(self, count, timeout=15, delivered=True):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.delivered() if delivered else list(self.requests)
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{len(self.requests)} requests, wanted {count}: {self.requests}")

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class Stalling:
    """A subscriber that reads each request and never finishes answering: with ``drip`` it
    sends one byte of an endless status line and headers every ``drip`` seconds (so no
    single read waits long), else it says nothing at all."""

    def __init__(self, drip=None):
        self.drip = drip
        self.arrivals = 0
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._stall, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _stall(self, conn):
        with conn:
            conn.recv(65536)
            self.arrivals += 1
            answer = itertools.chain(b"HTTP/1.1 200 OK\r\nX-Drip: ", itertools.repeat(ord("a")))
            while not self.stopping.wait(self.drip):
                try:
                    conn.sendall(bytes([next(answer)]))
                except OSError:  # the client gave up and closed
                    return

    def close(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def serve_flags(*urls, attempts=10, backoff=0.05):
    """plant-store serve's flags to deliver to ``urls`` with the receivers' secret."""
    return ["--webhook-urls", " ".join(urls), "--webhook-secret", SECRET,
            "--webhook-backoff", str(backoff), "--webhook-max-attempts", str(attempts),
            "--webhook-timeout", "2"]
