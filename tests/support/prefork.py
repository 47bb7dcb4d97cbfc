"""Pre-fork WSGI servers (gunicorn, uWSGI) as real processes on
``plant_store.wsgi:application``, with their workers in a session of their own."""

import os
import signal
import subprocess
import sys
import threading
import time

from plant_store.tokens import TokenFile
from support.servers import free_port, http_request

BIN = os.path.dirname(sys.executable)
APP = "plant_store.wsgi:application"


class WsgiServer:
    """A WSGI server process (and its workers, in a session of their own) on a free port."""

    def __init__(self, command, data_dir, env=None, stop_signal=signal.SIGTERM):
        self.port = free_port()
        self.data_dir = data_dir
        self.stop_signal = stop_signal
        self.token = TokenFile(str(data_dir / "tokens.json")).add("t")
        self.proc = subprocess.Popen(
            [arg.format(port=self.port) for arg in command], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, "PLANT_STORE_DATA_DIR": str(data_dir),
                 "PLANT_STORE_LOG_LEVEL": "warning", **(env or {})})
        self.output = []
        self._reader = threading.Thread(target=self._collect)
        self._reader.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.request("GET", "/health", timeout=5)
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError("server did not answer:\n" + "".join(self.output))

    def _collect(self):
        for line in self.proc.stdout:
            self.output.append(line)

    def request(self, method, path, body=None, timeout=15):
        return http_request("127.0.0.1", self.port, method, path, body, self.token,
                            timeout=timeout)

    def create(self, plant_id, name, deadline=20):
        """POST until an answer other than 503 or a connection error (a safe retry: the
        contract's create is idempotent); the last (status, headers, body)."""
        give_up = time.monotonic() + deadline
        while True:
            try:
                answer = self.request("POST", "/plants", {"id": plant_id, "name": name})
                if answer[0] != 503:
                    return answer
            except OSError:
                answer = (None, None, None)
            if time.monotonic() > give_up:
                return answer
            time.sleep(0.05)

    def owner(self):
        return int((self.data_dir / "plants.lock").read_text())

    def stop(self):
        """Stop the server and every worker it left; return the server's exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not os.waitid(
                    os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                time.sleep(0.05)
            # Not yet reaped, so its group id is still ours: end what it left, and only that.
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)
        self._reader.join(5)
        self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


def gunicorn(tmp_path, *args, env=None):
    return WsgiServer([os.path.join(BIN, "gunicorn"), "-b", "127.0.0.1:{port}", *args, APP],
                      tmp_path / "data", env)


def uwsgi(tmp_path, *args, env=None):
    # SIGINT stops uWSGI 2.0 (SIGTERM reloads it).
    return WsgiServer([os.path.join(BIN, "uwsgi"), "--http-socket", "127.0.0.1:{port}",
                       "--module", APP, "--disable-logging", *args],
                      tmp_path / "data", {"PLANT_STORE_LOCK_TIMEOUT": "1", **(env or {})},
                      signal.SIGINT)
