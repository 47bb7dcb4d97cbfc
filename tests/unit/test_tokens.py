"""The token file as the server sees it: hashes only, reloads, and no races."""

import hashlib
import logging
import shutil
import threading

import pytest

from plant_store.tokens import TokenFile
from support.assertions import assert_error


def test_concurrent_first_checks_all_see_the_loaded_tokens(tmp_path):
    """Regression: threads arriving while the first load ran were refused a valid token."""
    path = str(tmp_path / "tokens.json")
    token = TokenFile(path).add("racer")
    refused = 0
    for _ in range(100):
        fresh = TokenFile(path)
        barrier = threading.Barrier(8)
        results = []

        def check(tokens=fresh, barrier=barrier, results=results):
            barrier.wait()
            results.append(tokens.verify(token))

        threads = [threading.Thread(target=check) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        refused += results.count(None)
    assert refused == 0


def test_changes_are_seen_after_the_recheck_interval(tmp_path):
    path = str(tmp_path / "tokens.json")
    clock = [0.0]
    tokens = TokenFile(path, recheck=1.0, clock=lambda: clock[0])
    assert tokens.verify("anything") is None
    token = TokenFile(path).add("late")
    assert tokens.verify(token) is None  # the file is not looked at again within a second
    clock[0] = 1.5
    assert tokens.verify(token) == "late"
    TokenFile(path).revoke("late")
    clock[0] = 3.0
    assert tokens.verify(token) is None


def test_unreadable_token_file_refuses_every_token(tmp_path, caplog):
    path = tmp_path / "tokens.json"
    tokens = TokenFile(str(path), recheck=0)
    token = tokens.add("x")
    assert tokens.verify(token) == "x"
    path.write_text("{broken")
    assert tokens.verify(token) is None
    assert "cannot read token file" in caplog.text


def test_a_token_file_whose_path_goes_through_a_file_refuses_every_token(tmp_path, caplog):
    """The hostile pass on issue 52's third round: a directory of the path replaced by a
    file made the check's stat raise (ENOTDIR), a 500 for every request; now every token is
    refused, said once in the log, and /ready names the problem."""
    folder = tmp_path / "sub"
    folder.mkdir()
    tokens = TokenFile(str(folder / "tokens.json"), recheck=0)
    token = tokens.add("x")
    assert tokens.verify(token) == "x"
    shutil.rmtree(folder)
    folder.write_text("a file now")
    assert tokens.verify(token) is None and tokens.verify(token) is None
    assert tokens.problem() is not None
    assert caplog.text.count("cannot read token file") == 1


@pytest.mark.parametrize("content", [
    '{"tokens": [{"label": "x", "sha256": 5, "created": "2026-01-01T00:00:00+00:00"}]}',
    '{"tokens": [{"label": ["x"], "sha256": "%s", "created": "2026-01-01T00:00:00+00:00"}]}',
    '{"tokens": [{"label": "x", "sha256": "%s"}]}',
    '{"tokens": [{"label": "x", "sha256": "\\ud800", "created": ""}]}',
    '{"tokens": [{"label": "x", "sha256": "%s", "created": null}]}',
    '{"tokens": ["%s"]}',
    '{"tokens": 5}',
    '{"tokens": {"x": "%s"}}',
    '["%s"]',
    '"%s"',
    "[" * 100_000 + "]" * 100_000,
], ids=["sha256-int", "label-list", "created-missing", "sha256-surrogate", "created-null",
        "entry-string", "tokens-int", "tokens-object", "top-list", "top-string", "deep"])
def test_a_malformed_token_file_refuses_every_token_with_one_error_line(
        app, tokens, token, caplog, content):
    with open(tokens.path, "w") as fh:
        fh.write(content.replace("%s", hashlib.sha256(token.encode()).hexdigest()))
    for _ in range(3):
        assert_error(app.get("/plants", expect_errors=True), 401)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"cannot read token file {tokens.path}")


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_token_file_that_never_ends_is_refused_at_once(app, tokens, token, caplog, kind):
    """A FIFO with no writer, /dev/zero, or a file of gigabytes in the token file's place
    would hold every request's token check (and grow the server) for as long as it reads."""
    import os
    import threading
    import time

    os.unlink(tokens.path)
    if kind == "fifo":
        os.mkfifo(tokens.path)
    elif kind == "device":
        os.symlink("/dev/zero", tokens.path)
    else:
        with open(tokens.path, "wb") as fh:
            fh.truncate(4 << 30)  # sparse: 4 GiB of zeros, no disk
    answers = []
    checking = threading.Thread(target=lambda: answers.append(
        app.get("/plants", expect_errors=True)), daemon=True)
    started = time.monotonic()
    checking.start()
    checking.join(timeout=5)
    assert answers, "the token check never returned"
    assert time.monotonic() - started < 2
    assert_error(answers[0], 401)
    assert any("cannot read token file" in r.getMessage() for r in caplog.records)


