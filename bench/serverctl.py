"""Start and stop servers for benchmarks: ``plant-store serve`` and the bare ceiling."""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time

from plant_store.tokens import TokenFile

HERE = os.path.dirname(os.path.abspath(__file__))


@contextlib.contextmanager
def running(command, taskset=None, wrapper=(), env=None, cwd=None):
    """Yield (host, port, proc) once ``command`` logs its URL; its log goes to a file.
    ``wrapper`` goes before the command (valgrind, say); ``env`` adds to the environment."""
    command = [*wrapper, *command]
    if taskset:
        command = ["taskset", "-c", taskset, *command]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log,
                                env={**os.environ, **(env or {})}, cwd=cwd)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                log.seek(0)
                match = re.search(r"listening on http://([\d.]+):(\d+)", log.read())
                if match:
                    break
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError("server failed to start:\n" + log.read())
                time.sleep(0.05)
            else:
                raise RuntimeError("server did not start in time")
            yield match.group(1), int(match.group(2)), proc
        finally:
            proc.terminate()
            proc.wait(30)


@contextlib.contextmanager
def plant_store(data_dir, *args, taskset=None, wrapper=(), tree=None):
    """Yield (host, port, token, proc) of a running service with a fresh token; ``tree``:
    a checkout to run the service from instead of this one (a version before a change)."""
    token = TokenFile(os.path.join(data_dir, "tokens.json")).add(f"bench-{time.time_ns()}")
    command = [sys.executable, "-m", "plant_store", "serve", "--port", "0",
               "--data-dir", data_dir, *args]
    env = {"PYTHONPATH": os.path.abspath(tree)} if tree else None
    # In the tree too: ``python -m`` puts the working directory before PYTHONPATH, so from
    # this checkout's root the "before" service would run this checkout's code.
    with running(command, taskset, wrapper, env, cwd=tree) as (host, port, proc):
        yield host, port, token, proc


@contextlib.contextmanager
def bare(taskset=None, wrapper=(), waitress_defaults=False):
    """Yield (host, port, token, proc) of the bare WSGI ceiling (it ignores the token);
    ``waitress_defaults``: on waitress as it comes, not with the service's settings."""
    env = {"BARE_WAITRESS_DEFAULTS": "1"} if waitress_defaults else None
    with running([sys.executable, os.path.join(HERE, "bare_app.py")], taskset, wrapper,
                 env) as (host, port, proc):
        yield host, port, "unused", proc
