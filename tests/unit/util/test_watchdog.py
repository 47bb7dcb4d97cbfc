"""The one watchdog's invariants (plant_store/util/concurrency.py), with threads: steps are
taken at the deadline and a grace apart, only while the work is entered, and never once
``exit`` has returned."""

import threading
import time

from plant_store.util.concurrency import Watchdog


def test_work_done_in_time_is_never_acted_on():
    watchdog = Watchdog(grace=0.05)
    taken = []
    entry = watchdog.enter(time.monotonic() + 0.2, lambda: taken.append("first"))
    assert watchdog.exit(entry) is False
    time.sleep(0.3)
    assert taken == []
    watchdog.close()


def test_steps_are_taken_at_the_deadline_then_a_grace_apart():
    watchdog = Watchdog(grace=0.1)
    taken, done = [], threading.Event()
    start = time.monotonic()
    entry = watchdog.enter(start + 0.05, lambda: taken.append(time.monotonic() - start),
                           lambda: (taken.append(time.monotonic() - start), done.set()))
    assert done.wait(5)
    assert 0.05 <= taken[0] < taken[1] and taken[1] - taken[0] >= 0.09
    assert watchdog.exit(entry) is True  # the caller must not reuse what was acted on
    watchdog.close()


def test_no_step_runs_once_exit_has_returned():
    """A step that is running when exit comes holds exit back; one not yet run never runs."""
    watchdog = Watchdog(grace=0.3)
    running, release, after_exit = threading.Event(), threading.Event(), []
    exited = threading.Event()

    def slow_step():
        running.set()
        release.wait(5)
        after_exit.append(exited.is_set())

    entry = watchdog.enter(time.monotonic(), slow_step, lambda: after_exit.append("second"))
    assert running.wait(5)
    answer = []
    leaving = threading.Thread(target=lambda: (answer.append(watchdog.exit(entry)),
                                               exited.set()))
    leaving.start()
    time.sleep(0.1)
    assert not exited.is_set()  # held back by the running step
    release.set()
    leaving.join(5)
    time.sleep(0.4)  # past the grace: the second step is never taken
    assert answer == [True] and after_exit == [False]
    watchdog.close()


def test_again_takes_the_last_step_again_only_while_entered():
    watchdog = Watchdog()
    taken, done = [], threading.Event()
    entry = watchdog.enter(time.monotonic(), lambda: (taken.append(1), done.set()))
    assert done.wait(5)
    time.sleep(0.05)
    watchdog.again(entry)  # a socket made while the step ran: shut down too
    assert len(taken) == 2
    assert watchdog.exit(entry) is True
    watchdog.again(entry)
    assert len(taken) == 2
    watchdog.close()


def test_many_deadlines_at_once_are_all_acted_on_by_one_watchdog():
    watchdog = Watchdog()
    count, lock = [0], threading.Lock()

    def step():
        with lock:
            count[0] += 1

    deadline = time.monotonic() + 0.05
    entries = [watchdog.enter(deadline, step) for _ in range(50)]
    stop = time.monotonic() + 5
    while count[0] < 50 and time.monotonic() < stop:
        time.sleep(0.01)
    assert count[0] == 50
    assert all(watchdog.exit(entry) for entry in entries)
    watchdog.close()
