"""A log reader that stalls (issue 42, finding 5): ``plant-store serve`` with its stderr a
pipe that nobody reads, refused requests (401s, each an access line) sent over real HTTP,
the server's resident memory after each mark, and the time it takes to exit after SIGTERM.

    .venv/bin/python bench/stalled_log_bench.py              # marks at 50,000 and 200,000
    .venv/bin/python bench/stalled_log_bench.py 10000 40000  # other marks
"""

import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CONNECTIONS = 4
PIPELINED = 100  # requests sent at once on a connection before its answers are read
REQUEST = b"GET /plants HTTP/1.1\r\nHost: bench\r\n\r\n"
ANSWER = b"HTTP/1.1 401 "


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss(pid: int) -> int:
    """Resident bytes of process ``pid``."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def refused(port: int, count: int) -> None:
    """``count`` requests without a token, pipelined on CONNECTIONS keep-alive connections;
    returns once every one is answered 401."""
    def connection(share: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            while share:
                batch = min(share, PIPELINED)
                sock.sendall(REQUEST * batch)
                seen, tail = 0, b""
                while seen < batch:
                    data = sock.recv(1 << 16)
                    if not data:
                        raise RuntimeError("the server closed the connection")
                    seen += (tail + data).count(ANSWER)
                    tail = data[-len(ANSWER):]  # an answer's start split across two reads
                share -= batch

    shares = [count // CONNECTIONS + (i < count % CONNECTIONS) for i in range(CONNECTIONS)]
    threads = [threading.Thread(target=connection, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def start(data_dir: str, port: int) -> subprocess.Popen[bytes]:
    """``plant-store serve`` whose stderr is a pipe this process never reads."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "plant_store", "serve", "--port", str(port), "--data-dir",
         data_dir, "--no-first-token"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start") from None
            time.sleep(0.05)


def main(marks: list[int]) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        proc = start(data_dir, port)
        try:
            refused(port, 1000)  # warm up: the pipe fills, imports and caches settle
            print(f"after {1000:>7} requests: RSS {rss(proc.pid) / 1e6:6.1f} MB", flush=True)
            done = 1000
            for mark in marks:
                began = time.monotonic()
                refused(port, mark - done)
                took = time.monotonic() - began
                print(f"after {mark:>7} requests: RSS {rss(proc.pid) / 1e6:6.1f} MB "
                      f"({(mark - done) / took:,.0f} requests/s)", flush=True)
                done = mark
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
                print(f"exited {time.monotonic() - began:.2f} s after SIGTERM "
                      f"(status {proc.returncode})")
            except subprocess.TimeoutExpired:
                print(f"still running {time.monotonic() - began:.0f} s after SIGTERM: killed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [50_000, 200_000])
