"""plant_store.serving.granian_adapter: which settings granian cannot honour as waitress does,
and the undocumented granian names it relies on, pinned against the installed release
(tests/integration/test_serve_granian.py and test_granian_edge.py run the real server)."""

import inspect
import io

import falcon
import granian
import pytest
from granian.server import common
from hypothesis import given, settings
from hypothesis import strategies as st

from plant_store.config import Config
from plant_store.serving import granian_adapter
from plant_store.serving.server_quirks import LengthRequired

GRANIAN = f"granian {granian.__version__}"


@pytest.mark.parametrize(("given", "refused", "says"), [
    ({"request_timeout": 61}, "request_timeout", "at most 60 s"),
    ({"workers": 2}, "workers", "store=jsonfile with 2 granian worker processes"),
    ({"workers": 2, "store": "memory"}, "workers", "store=memory with 2 granian"),
])
def test_settings_that_cannot_mean_the_same_are_refused(given, refused, says):
    problem = granian_adapter.refusal(Config(server="granian", **given))
    assert problem is not None and problem[0] == refused and says in problem[1]


@pytest.mark.parametrize("given", [
    {}, {"request_timeout": 60, "threads": 4, "probe_port": 8081, "max_body_size": 10},
    {"workers": 4, "store": "postgresql", "database_url": "dbname=x", "metrics": "off"},
    {"workers": 2, "store": "postgresql", "database_url": "dbname=x"},  # counted together
    {"url_prefix": "/api", "trusted_proxy": "127.0.0.1", "rate_limit": 5},
    # kept by the connection upkeep since issue 49
    {"connection_limit": 50, "channel_timeout": 5, "min_send_rate": 100,
     "send_rate_window": 5},
])
def test_settings_granian_honours_pass(given):
    assert granian_adapter.refusal(Config(server="granian", **given)) is None


def test_the_master_takes_sighup_through_signal_handler_reload():
    """The one undocumented name: granian's master installs ``signal_handler_reload`` for
    SIGHUP (to respawn its workers); the adapter overrides it to stop, as waitress does."""
    source = inspect.getsource(common.AbstractServer.startup)
    assert "set_main_signals(self.signal_handler_interrupt, self.signal_handler_reload)" in (
        source), f"{GRANIAN}: the master's signal handlers changed"
    assert callable(getattr(granian.Granian, "signal_handler_reload", None)), GRANIAN
    server = granian_adapter._server_class()(
        "target", log_dictconfig={"formatters": {}, "handlers": {}, "loggers": {}})
    server.hup_ignored = True
    server.signal_handler_reload()
    assert not server.main_loop_interrupt.is_set()  # nohup: stays without effect
    server.hup_ignored = False
    server.signal_handler_reload()
    assert server.interrupt_signal and server.main_loop_interrupt.is_set(), GRANIAN
    assert not server.reload_signal


def test_a_dead_worker_is_replaced_through_respawn_workers():
    """The second undocumented name: granian's serve loop calls ``_respawn_workers`` with
    the indexes of the workers that ended unexpectedly (``respawn_failed_workers``); the
    adapter's override counts them, or stops the server when a worker said it could not
    start."""
    import multiprocessing

    source = inspect.getsource(common.AbstractServer._serve_loop)
    assert "self._respawn_workers(workers, spawn_target, target_loader)" in source, GRANIAN
    assert "if not self.respawn_failed_workers:" in source, GRANIAN
    parameters = inspect.signature(common.AbstractServer.__init__).parameters
    assert parameters["respawn_failed_workers"].default is False, GRANIAN
    server = granian_adapter._server_class()(
        "target", log_dictconfig={"formatters": {}, "handlers": {}, "loggers": {}})
    reader, writer = multiprocessing.Pipe(duplex=False)
    server.failed = reader
    writer.send("the data directory is locked")
    server._respawn_workers([0], None, None)  # no worker is spawned: the server stops
    assert server.interrupt_signal and server.main_loop_interrupt.is_set()
    reader.close()
    writer.close()


def test_a_body_refused_as_too_large_before_the_app_is_counted():
    """The hostile pass on issue 52: granian's own 413s reached no metric (waitress's do)."""
    counted = []
    refusing = granian_adapter._front(lambda environ, start: [b"app"], 10,
                                      lambda *request: counted.append(request))
    statuses = []
    answer = refusing({"REQUEST_METHOD": "POST", "PATH_INFO": "/plants",
                       "CONTENT_LENGTH": "11"}, lambda status, headers: statuses.append(status))
    assert statuses == ["413 Content Too Large"] and b"413" in b"".join(answer)
    assert counted == [("POST", "/plants", 413)]
    assert refusing({"CONTENT_LENGTH": "10"}, None) == [b"app"] and len(counted) == 1


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 10**12), st.one_of(
    st.integers(0, 10**13).map(str), st.text("0123456789", max_size=16),
    st.text(max_size=16)))
def test_the_front_refuses_exactly_the_lengths_over_the_limit(limit, length):
    """Its shortcut (a length of fewer digits than the limit's is under it, unread) refuses
    what comparing every length as a number refuses."""
    refused = []
    front = granian_adapter._front(lambda environ, start: [b"app"], limit)
    front({"CONTENT_LENGTH": length, "wsgi.input": io.BytesIO()},
          lambda status, headers: refused.append(status))
    assert bool(refused) == (length.isascii() and length.isdigit() and int(length) > limit)


@pytest.mark.parametrize(("environ", "refused"), [
    ({"SERVER_PROTOCOL": "HTTP/1.1", "HTTP_TRANSFER_ENCODING": "chunked"}, True),
    ({"SERVER_PROTOCOL": "HTTP/2"}, True),
    ({"SERVER_PROTOCOL": "HTTP/2", "CONTENT_LENGTH": "5"}, False),
    ({"SERVER_PROTOCOL": "HTTP/1.1"}, False),  # neither header: no body
])
def test_the_front_refuses_a_body_without_a_length_when_read_as_length_required_does(
        environ, refused):
    """One step for granian's two refusals: its 411 is LengthRequired's, on any request."""
    seen = []
    front = granian_adapter._front(lambda env, start: seen.append(dict(env)) or [b""], 10)
    front(dict(environ, **{"wsgi.input": io.BytesIO(b"hello")}), None)
    LengthRequired(lambda env, start: seen.append(dict(env)) or [b""])(
        dict(environ, **{"wsgi.input": io.BytesIO(b"hello")}), None)
    by_front, by_quirk = seen
    for env in seen:
        if refused:
            with pytest.raises(falcon.HTTPLengthRequired):
                env["wsgi.input"].read()
        else:
            assert env["wsgi.input"].read() == b"hello"
    assert by_front.keys() == by_quirk.keys()
