"""Where a thread is: a test that must know a thread is blocked (not merely slow to get
there) asks its stack, instead of sleeping and hoping it got that far."""

import sys
import threading
import time


def blocked_in(thread: threading.Thread, function: str, timeout: float = 10.0) -> bool:
    """Wait until ``thread`` waits on a lock or a condition (``threading``'s ``wait``) under
    a call of ``function``; False if it ends first, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        if names[:1] == ["wait"] and function in names:
            return True
        time.sleep(0.001)
    return False
