"""Start and stop ``plant-store serve`` for benchmarks, with a token ready to use."""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time

from plant_store.tokens import TokenFile


@contextlib.contextmanager
def plant_store(data_dir, *args, taskset=None):
    """Yield (host, port, token) of a running server; its log goes to a file, not the load."""
    token = TokenFile(os.path.join(data_dir, "tokens.json")).add(f"bench-{time.time_ns()}")
    command = [sys.executable, "-m", "plant_store", "serve", "--port", "0",
               "--data-dir", data_dir, *args]
    if taskset:
        command = ["taskset", "-c", taskset, *command]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                log.seek(0)
                match = re.search(r"listening on http://([\d.]+):(\d+)", log.read())
                if match:
                    break
                if proc.poll() is not None:
                    raise RuntimeError("server failed to start:\n" + log.read())
                time.sleep(0.05)
            else:
                raise RuntimeError("server did not start in time")
            yield match.group(1), int(match.group(2)), token, proc
        finally:
            proc.terminate()
            proc.wait(30)
