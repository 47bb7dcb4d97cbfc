"""How much of the ceiling each layer takes, served the same way, side by side in one run:
bare waitress (``bare_app.py``, the baseline), the same app with N us of pure-Python work
per request, a minimal Falcon app (one route, orjson in and out, no middleware), and ours
(memory store) with and without metrics.

    python bench/layers_bench.py              # 9 rounds of 2 s, 16 connections
    python bench/layers_bench.py --rounds 7 --spin 6,11

Each server is started by this script with ``--serve KIND`` (every one on the service's
own server settings, through ``plant_store.serving.server.create_server``), pinned to CPU
0, wrk on CPU 1, as in ``speed_bench.py``.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time

import loadgen
import serverctl

BASELINE = "bare waitress, trivial WSGI app"


def serve(kind, spin_us):
    import falcon
    import orjson
    from bare_app import application as bare

    from plant_store import config
    from plant_store.serving.server import create_server

    if kind == "spin":
        spin = spin_us / 1e6

        def app(environ, start_response):
            end = time.perf_counter() + spin
            while time.perf_counter() < end:
                pass
            return bare(environ, start_response)
    else:
        class Plants:
            def on_post(self, req, resp):
                document = orjson.loads(req.stream.read(1 << 20))
                resp.data = orjson.dumps({"name": document["name"], "tag": document.get("tag")})

        app = falcon.App()
        app.add_route("/plants", Plants())
    server = create_server(app, config.load(None, os.environ, {"port": "0"}))
    print(f"{kind} listening on http://{server.effective_host}:{server.effective_port}",
          file=sys.stderr, flush=True)
    server.run()


@contextlib.contextmanager
def this(kind, spin_us=0.0):
    command = [sys.executable, os.path.abspath(__file__), "--serve", kind, "--spin-us",
               str(spin_us)]
    with serverctl.running(command, "0") as (host, port, proc):
        yield host, port, "unused", proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--spin", default="11", help="comma-separated microseconds")
    parser.add_argument("--serve", choices=("spin", "falcon"), help=argparse.SUPPRESS)
    parser.add_argument("--spin-us", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.spin_us)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        running = {BASELINE: stack.enter_context(serverctl.bare(taskset="0"))}
        for us in args.spin.split(","):
            running[f"bare + {us} us of Python a request"] = stack.enter_context(
                this("spin", float(us)))
        running["Falcon, one route, orjson"] = stack.enter_context(this("falcon"))
        running["ours, memory store"] = stack.enter_context(serverctl.plant_store(
            os.path.join(tmp, "m"), "--store", "memory", taskset="0"))
        running["ours, memory store, metrics off"] = stack.enter_context(
            serverctl.plant_store(os.path.join(tmp, "q"), "--store", "memory",
                                  "--metrics", "off", taskset="0"))
        results = loadgen.take_turns(running, args.rounds, args.seconds, args.connections)
        loadgen.report(results, BASELINE)
    return None


if __name__ == "__main__":
    sys.exit(main())
