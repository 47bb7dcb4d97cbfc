"""An app that writes its access log to a stream, and the lines once flushed; a stream that
stalls."""

import io
import threading
import time

import webtest

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.metrics import for_config
from plant_store.stores import MemoryStore


def logged_app(tokens, token, log_level="info"):
    stream = io.StringIO()
    config, store = Config(store="memory", log_level=log_level), MemoryStore()
    app = create_app(config, store=store, tokens=tokens, log_stream=stream,
                     metrics=for_config(config, store))
    return webtest.TestApp(app, extra_environ={"HTTP_AUTHORIZATION": f"Bearer {token}"}), stream


def lines_when(stream, count):
    """The stream's lines once ``count`` have been flushed (the flusher runs every 0.2 s)."""
    deadline = time.monotonic() + 5
    while len(lines := stream.getvalue().splitlines()) < count:
        assert time.monotonic() < deadline, f"expected {count} access lines, got {lines}"
        time.sleep(0.02)
    return lines


class Stalled(io.StringIO):
    """A destination that takes nothing until released, as a stderr nobody reads."""

    def __init__(self):
        super().__init__()
        self.entered, self.released = threading.Event(), threading.Event()

    def write(self, text):
        self.entered.set()
        assert self.released.wait(10)
        return super().write(text)
