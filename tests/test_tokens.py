"""The token file as the server sees it: hashes only, reloads, and no races."""

import threading

from plant_store.tokens import TokenFile


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
