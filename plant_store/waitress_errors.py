"""The answers waitress makes itself, in the Error shape like the app's.

Waitress refuses some requests before the app sees them (malformed request line, headers or
chunk framing, a bad Content-Length, an unknown Transfer-Encoding, headers or a body over its
limits) and answers a 500 when a response breaks after the app, all as ``text/plain``. Its
channel makes each of these with ``error_task_class``; ours writes the Error JSON instead,
with waitress's status line and its ``Connection: close``. These hooks are waitress
internals, so ``setup.cfg`` pins the versions they were read in.
"""

from collections.abc import Callable

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, MultiSocketServer
from waitress.task import ErrorTask
from waitress.utilities import Error

from plant_store import errors


def _message(error: Error, adj: Adjustments) -> str:
    """A plain sentence for one of waitress's errors."""
    if error.code == 431:
        return (f"The request headers are larger than the limit of "
                f"{adj.max_request_header_size} bytes.")
    if error.code == 413:  # create_server sets waitress's limit one past max_body_size
        return errors.TOO_LARGE.format(adj.max_request_body_size - 1)
    if error.code == 501:
        return ("The request's Transfer-Encoding is not supported; send the body with "
                "Content-Length or Transfer-Encoding: chunked.")
    if error.code == 400:  # waitress's reason, e.g. 'Invalid chunk size', may quote the client
        detail = str(error.body)
        return f"The request is not valid HTTP: {detail[:100].rstrip('.')}."
    return errors.INTERNAL  # its traceback is in the log, as waitress logs it


class JsonErrorTask(ErrorTask):
    """Waitress's ErrorTask with the Error JSON for a body."""

    def execute(self) -> None:
        # Waitress gives an ErrorTask its parser (typeshed says an Error), whose .error this
        # is; its channel is a JsonErrorChannel, the one class that uses this task.
        error = self.request.error  # type: ignore[attr-defined]
        on_refused = self.channel.on_refused  # type: ignore[attr-defined]
        if on_refused is not None:  # the metrics: the app never sees these requests
            # A request refused in its first line has no method or path yet.
            on_refused(getattr(self.request, "command", None) or "",
                       getattr(self.request, "path", None) or "", error.code)
        body = errors.document(error.code, _message(error, self.channel.adj))
        self.status = f"{error.code} {error.reason}"
        # A list in waitress; typeshed's Sequence forbids the append it does itself.
        self.response_headers.append(("Content-Type", "application/json"))  # type: ignore[attr-defined]
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):
    """Waitress's channel, answering its errors with JsonErrorTask."""

    error_task_class = JsonErrorTask
    on_refused: Callable[[str, str, int], None] | None = None

    def send_continue(self) -> None:
        # Waitress would invite the body of an 'Expect: 100-continue' request it has already
        # refused (a Content-Length over the limit), then read it up to the limit.
        # send_continue runs for a request being read: self.request is never None here.
        if self.request.error is None:  # type: ignore[union-attr]
            super().send_continue()


def use_json_errors(
    server: BaseWSGIServer | MultiSocketServer,
    on_refused: Callable[[str, str, int], None] | None = None,
) -> None:
    """Give every listening socket of ``server`` (a MultiSocketServer has several) our
    channel; ``on_refused(method, path, status)`` is told of each error it answers."""
    channel = type("JsonErrorChannel", (JsonErrorChannel,),
                   {"on_refused": staticmethod(on_refused) if on_refused else None})
    # create_server always gives a MultiSocketServer its map: never None here.
    listeners = (server.map.values()  # type: ignore[union-attr]
                 if isinstance(server, MultiSocketServer) else [server])
    for listener in listeners:
        if isinstance(listener, BaseWSGIServer):  # not the map's wake-up triggers
            listener.channel_class = channel
