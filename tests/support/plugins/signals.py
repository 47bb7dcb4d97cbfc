"""Signals a runner's parent ignored are not ignored in the processes the tests start."""

import signal


def _ignore(signum, frame):
    """Ignores a signal, as SIG_IGN would, but is reset to the default in a child."""


def pytest_configure(config):
    """A runner started under nohup, or in a shell's background, ignores SIGHUP or SIGINT,
    and an ignored signal stays ignored across exec: the servers the tests stop with them
    would not stop. A handler that does nothing keeps ignoring them here, and is reset to
    the default in every process the tests start (a handler, unlike an ignore, does not
    outlive exec)."""
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, _ignore)

