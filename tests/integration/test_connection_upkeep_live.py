"""plant_store.serving.connection_upkeep, in process: the kernel's view of connections this
process accepted (as a granian worker's), and each rule of the upkeep, on real loopback
sockets (so not in tests/unit); tests/integration/test_granian_edge.py runs it in granian."""

import socket
import time

import pytest

from plant_store.serving import connection_upkeep
from plant_store.serving.connection_upkeep import ConnectionUpkeep, Seen
from support.servers import closed_within

pytestmark = pytest.mark.skipif(not connection_upkeep.sys.platform.startswith("linux"),
                                reason="TCP_INFO as Linux lays it out")


class Pairs:
    """A listener and the connections it accepted (the 'server' side, which the upkeep
    sees) with their clients."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs = []

    def connect(self, rcvbuf=None):
        client = socket.socket()
        if rcvbuf:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        client.connect(("127.0.0.1", self.port))
        server, _ = self.listener.accept()
        self.pairs.append((server, client))
        return server, client

    def close(self):
        for server, client in self.pairs:
            server.close()
            client.close()
        self.listener.close()


@pytest.fixture
def pairs():
    made = Pairs()
    yield made
    made.close()


def upkeep(port, **given):
    settings = {"request_timeout": 30, "channel_timeout": 120, "limit": 100, "min_rate": 0,
                "window": 20, "running": lambda: ([], False), **given}
    return ConnectionUpkeep(port, **settings)


def still_open(client):
    """Whether the server has not ended the connection; reads nothing of it."""
    try:
        return client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False


def test_the_kernels_view_of_a_connection(pairs):
    server, client = pairs.connect(rcvbuf=4096)
    seen = connection_upkeep.read(server)
    assert (seen.received, seen.queued) == (0, 0) and seen.between_requests
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    time.sleep(0.05)
    seen = connection_upkeep.read(server)
    assert seen.received == 18 and not seen.between_requests  # the client spoke last
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            server.send(b"x" * 65536)  # until the client's window and our buffer are full
    seen = connection_upkeep.read(server)
    assert seen.queued > 0 and seen.between_requests


def test_only_connections_to_the_port_are_found(pairs):
    server, _ = pairs.connect()
    other = Pairs()
    try:
        other.connect()
        queued = socket.create_connection(("127.0.0.1", pairs.port))  # not taken yet
        time.sleep(0.05)
        found, waiting = connection_upkeep.connections(pairs.port)
        queued.close()
        try:
            assert waiting == 1  # the listener's queue
            assert len(found) == 1  # not the listener, nor the other port's, nor the clients
            [sock] = found.values()
            assert sock.getpeername() == server.getpeername() and sock.fileno() != server.fileno()
        finally:
            for sock in found.values():
                sock.close()
    finally:
        other.close()
    server.send(b"still open")  # the upkeep closed its duplicates only


def test_a_connection_that_sends_nothing_is_closed_at_request_timeout(pairs):
    _, silent = pairs.connect()
    _, spoke = pairs.connect()
    spoke.sendall(b"GET")
    keeper = upkeep(pairs.port, request_timeout=0.2)
    assert keeper.sweep(time.monotonic()) == []
    time.sleep(0.3)
    assert [why for _, why in keeper.sweep(time.monotonic())] == ["sent nothing"]
    assert closed_within(silent) and still_open(spoke)


def test_quiet_connections_close_at_channel_timeout_unless_a_request_may_be_theirs(pairs):
    _, between = pairs.connect()
    _, arriving = pairs.connect()
    between.sendall(b"GET / HTTP/1.1\r\n\r\n")
    time.sleep(0.05)
    for server, _ in pairs.pairs[:1]:
        server.recv(100)
        server.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")  # the server spoke last
    arriving.sendall(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n{")
    time.sleep(0.3)

    def closed(running):
        keeper = upkeep(pairs.port, channel_timeout=0.2, running=lambda: running)
        return sorted(why for _, why in keeper.sweep(time.monotonic()))

    assert closed(([0.1], False)) == ["idle"]  # a call began since arriving's last byte
    assert closed_within(between) and still_open(arriving)
    pairs.pairs[0][0].close()  # as granian does, seeing it end
    assert closed(([0.5], True)) == []  # every thread busy: arriving's may wait for one
    assert closed(([0.5], False)) == ["idle"]  # no call since its last byte: not its
    assert closed_within(arriving)


def test_an_answer_must_move(pairs):
    server, client = pairs.connect(rcvbuf=4096)
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            server.send(b"x" * 65536)
    time.sleep(0.1)  # the client's buffer filled
    keeper = upkeep(pairs.port, request_timeout=0.3)
    assert keeper.sweep(time.monotonic()) == []
    time.sleep(0.4)
    assert [why for _, why in keeper.sweep(time.monotonic())] == ["answer unread"]
    assert closed_within(client)


def test_an_answer_slower_than_min_rate_over_the_window_is_reset():
    keeper = upkeep(1, min_rate=1000, window=2)
    now = 100.0
    for step in range(1, 6):  # 500 bytes a second: too slow, judged at 2 s of waiting
        why = keeper._judge_answer(7, Seen(0, 0, 10, 500 * step, 4096), now + step, 1.0)
        if why:
            break
    assert why == "answer read too slowly" and step == 2
    fast = upkeep(1, min_rate=1000, window=2)
    assert not any(fast._judge_answer(8, Seen(0, 0, 10, 5000 * step, 4096), now + step, 1.0)
                   for step in range(1, 8))


def test_at_the_limit_idle_connections_go_first_then_the_slowest_reader(pairs):
    idle = [pairs.connect() for _ in range(3)]
    reader_side, reader = pairs.connect(rcvbuf=4096)
    reader_side.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            reader_side.send(b"x" * 65536)
    keeper = upkeep(pairs.port, limit=4)
    time.sleep(connection_upkeep.EVICT_AFTER + 0.1)
    closed = keeper.sweep(time.monotonic())
    assert sorted(why for _, why in closed) == ["idle at the limit"] * 3
    assert all(closed_within(client) for _, client in idle) and still_open(reader)
    assert not keeper.held and keeper.unready() is None
    for server, _ in idle:  # as granian does, seeing them end
        server.close()
    pairs.connect()[1].sendall(b"GET")  # a request arriving: it stays, the reader goes
    keeper = upkeep(pairs.port, limit=2)
    now = time.monotonic()
    assert keeper.sweep(now) == [] and not keeper.held
    # Nobody waits to get in: a slow download is not cut (the hostile pass on issue 49).
    assert keeper.sweep(now + connection_upkeep.UNREAD_AFTER) == []
    with socket.create_connection(("127.0.0.1", pairs.port)):  # one waits in the queue
        time.sleep(0.05)
        closed = keeper.sweep(now + 2 * connection_upkeep.UNREAD_AFTER)
    assert [why for _, why in closed] == ["slowest reader at the limit"]
    assert closed_within(reader)


def test_every_slot_held_by_requests_arriving_is_unready(pairs):
    for _ in range(3):
        pairs.connect()[1].sendall(b"POST /plants HTTP/1.1\r\nContent-Length: 9\r\n\r\n{")
    keeper = upkeep(pairs.port, limit=3)
    time.sleep(0.05)
    assert keeper.sweep(time.monotonic()) == []  # none may be let go: the client spoke last
    assert not keeper.held  # nobody waits to get in
    with socket.create_connection(("127.0.0.1", pairs.port)):  # one waits in the queue
        time.sleep(0.05)
        assert keeper.sweep(time.monotonic()) == []
    assert keeper.held and "connection slot (3)" in keeper.unready()


def test_at_the_limit_with_clients_waiting_silent_connections_go_within_a_quarter_second(
        pairs):
    """The hostile pass on issue 49: attackers that connect and send nothing, reconnecting
    as each is let go, held the slots a second each, so an honest client waited a second
    for every one (2.5 creates/s). An honest client sends as it connects: while others
    wait, one that has sent nothing goes after UNREAD_AFTER."""
    silent = [pairs.connect()[1] for _ in range(3)]
    keeper = upkeep(pairs.port, limit=3)
    time.sleep(connection_upkeep.UNREAD_AFTER + 0.05)
    assert keeper.sweep(time.monotonic()) == []  # nobody waits: they may stay
    with socket.create_connection(("127.0.0.1", pairs.port)):
        time.sleep(0.05)
        closed = keeper.sweep(time.monotonic())
    assert [why for _, why in closed] == ["idle at the limit"] * 3
    assert all(closed_within(client) for client in silent)
