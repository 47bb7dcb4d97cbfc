"""The real-server half of tests/unit/test_tokens.py: the token file as the server sees it:
hashes only, reloads, and no races."""



import time

import pytest

from plant_store.tokens import TokenFile


def test_changes_from_many_processes_at_once_lose_none(tmp_path):
    """Each change reads the entries and writes them back: two at once lost one."""
    import subprocess
    import sys

    path = str(tmp_path / "tokens.json")
    script = ("import sys; from plant_store.tokens import TokenFile; "
              "f = TokenFile(sys.argv[1]); print(f.add_first('initial') or '-'); "
              "f.add(sys.argv[2])")
    procs = [subprocess.Popen([sys.executable, "-c", script, path, f"p{n}"],
                              stdout=subprocess.PIPE, text=True) for n in range(8)]
    firsts = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    labels = sorted(e.label for e in TokenFile(path).entries())
    assert labels == sorted(["initial", *(f"p{n}" for n in range(8))])
    made = [token for token in firsts if token != "-"]
    assert len(made) == 1 and TokenFile(path).verify(made[0]) == "initial"


@pytest.mark.slow
def test_an_unreadable_token_file_is_refused_at_start_and_unready_at_run_time(tmp_path):
    """The second hostile pass on issue 42: a server started with a token file it cannot
    read said ready and refused every valid token. Refused at start in one line; a file
    broken under a running server makes /ready 503 until it is fixed."""
    from support.servers import Server, http_request, run_cli

    data = tmp_path / "data"
    data.mkdir()
    (data / "tokens.json").write_text('{"id": 1, "name": "not tokens"}')
    started = run_cli("serve", "--port", "0", "--data-dir", str(data))
    lines = started.stderr.strip().splitlines()
    assert started.returncode == 2 and len(lines) == 1 and "token_file" in lines[0], lines
    (data / "tokens.json").unlink()
    with Server(data) as server:
        token = server.first_token
        good = (data / "tokens.json").read_bytes()
        assert http_request("127.0.0.1", server.port, "GET", "/ready")[0] == 200
        (data / "tokens.json").write_text("[1, 2")
        time.sleep(1.2)  # the file is read again within a second
        status, _, body = http_request("127.0.0.1", server.port, "GET", "/ready")
        assert status == 503 and "token" in body["message"], body
        (data / "tokens.json").write_bytes(good)
        time.sleep(1.2)
        assert http_request("127.0.0.1", server.port, "GET", "/ready")[0] == 200
        assert server.request("GET", "/plants", token=token)[0] == 200
