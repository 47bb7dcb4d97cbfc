"""The command line: tokens, and clear one-line errors for bad configuration."""

import json
import os
import stat
import subprocess
import sys

import pytest

from plant_store.stores import JsonFileStore
from plant_store.stores.records import Plant
from plant_store.tokens import TokenFile
from support.servers import Server, run_cli

run = run_cli


def test_token_add_list_revoke(tmp_path):
    token_file = str(tmp_path / "t.json")
    added = run("token", "add", "--label", "alice", "--token-file", token_file)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert len(token) >= 40
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    stored = (tmp_path / "t.json").read_text()
    assert token not in stored and "alice" in stored
    assert TokenFile(token_file).verify(token) == "alice"

    listed = run("token", "list", "--token-file", token_file)
    assert listed.returncode == 0
    assert listed.stdout.split("\t")[0] == "alice" and token not in listed.stdout

    assert run("token", "add", "--label", "alice", "--token-file", token_file).returncode == 2
    revoked = run("token", "revoke", "alice", "--token-file", token_file)
    assert revoked.returncode == 0
    assert TokenFile(token_file).verify(token) is None
    assert json.loads((tmp_path / "t.json").read_text()) == {"tokens": []}

    missing = run("token", "revoke", "alice", "--token-file", token_file)
    assert missing.returncode == 2 and "no token labelled 'alice'" in missing.stderr


def one_error_line(result):
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plant-store: error: ")
    return lines[0]


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--store", "sqlite"], {}, "store='sqlite'"),
    (["--port", "70000"], {}, "port='70000'"),
    ([], {"PLANT_STORE_PORT": "-1"}, "PLANT_STORE_PORT"),
    (["--config", "/nonexistent/plant-store.ini"], {}, "cannot read config file"),
])
def test_bad_configuration_is_one_line_and_exit_2(tmp_path, args, env, expected):
    result = run("serve", "--data-dir", str(tmp_path), *args, env=env)
    assert expected in one_error_line(result)


def test_unwritable_data_path_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run("serve", "--port", "0", "--data-dir", str(blocker / "data"), "--token-file",
                 str(tmp_path / "t.json"))
    assert "cannot create data directory" in one_error_line(result)


def test_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--data-dir", str(tmp_path), "--port", str(port))
    assert "cannot listen on 127.0.0.1" in one_error_line(result)
    assert not (tmp_path / "tokens.json").exists()  # no token made that nobody was shown


def test_a_probe_port_equal_to_the_port_is_refused_before_anything_is_made(tmp_path):
    """Issue 46: --probe-port equal to --port failed in waitress's words ("Address already
    in use") and left plants.jsonl and plants.lock behind."""
    import socket

    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    data = tmp_path / "data"
    result = run("serve", "--data-dir", str(data), "--port", str(port), "--probe-port", str(port))
    assert f"setting probe_port={port} is port too" in one_error_line(result)
    assert not data.exists()


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "plant-store")
    result = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout.startswith("plant-store ")


def test_revoking_the_last_token_is_not_undone_by_a_restart(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        token = server.first_token
    assert run("token", "revoke", "initial", "--data-dir", str(data)).returncode == 0
    with Server(data) as server:
        status, _, _ = server.request("GET", "/plants", token=token)
        assert status == 401
    assert "only this once" not in "".join(server.stdout)
    assert json.loads((data / "tokens.json").read_text()) == {"tokens": []}


def _help(*command):
    result = run_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_each_command_offers_only_the_settings_it_reads():
    token_add = _help("token", "add")
    assert "--label LABEL" in token_add and "--data-dir DIR" in token_add
    assert "--port" not in token_add and "--webhook-urls" not in token_add
    assert "Issue a token and print it, this once." in token_add  # its description
    serve = _help("serve")
    for flag in ("--port PORT", "--store {memory,jsonfile,postgresql}", "--fsync {true,false}",
                 "--log-format {text,json}", "--data-dir DIR", "--lock-timeout SECONDS"):
        assert flag in serve
    assert "[default: 8080; env PLANT_STORE_PORT]" in " ".join(serve.split())
    assert "--label" not in serve
    assert "--port" not in _help("plants", "list") and "--store" in _help("plants", "list")


@pytest.mark.slow
def test_help_has_no_restructuredtext_markup_and_every_command_a_description():
    texts = [_help(), *(_help(*c) for c in (
        ("serve",), ("check",), ("compact",), ("export",), ("import",), ("plants", "list"),
        ("plants", "get"), ("token", "add"), ("token", "list"), ("token", "revoke"),
        ("webhooks", "list"), ("webhooks", "retry"), ("db", "migrate"), ("db", "check")))]
    for text in texts:
        assert "``" not in text and ":data:" not in text
        assert len([line for line in text.splitlines() if line and not line.startswith(
            (" ", "usage:", "options:", "settings", "positional"))]) >= 1


def test_plants_list_and_get_show_ids_beside_a_running_server(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        for plant in ({"id": 7, "name": "Fern"}, {"id": -2, "name": "tab\there", "tag": "t"}):
            assert server.request("POST", "/plants", plant, token=server.first_token)[0] == 200
        listed = run_cli("plants", "list", "--data-dir", str(data))
        got = run_cli("plants", "get", "-2", "--data-dir", str(data))
        missing = run_cli("plants", "get", "8", "--data-dir", str(data))
        bad = run_cli("plants", "get", "x", "--data-dir", str(data))
        first = run_cli("plants", "list", "--limit", "1", "--data-dir", str(data))
    assert listed.stdout == "7\tFern\n-2\ttab\\x09here\tt\n"
    assert json.loads(got.stdout) == {"id": -2, "name": "tab\there", "tag": "t"}
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "no plant with id 8" in missing.stderr
    assert bad.returncode == 2 and "must be an integer" in bad.stderr
    assert first.stdout == "7\tFern\n"
    memory = run_cli("plants", "list", "--store", "memory", "--data-dir", str(data))
    assert memory.returncode == 2 and "inside its server's process" in memory.stderr


def test_webhooks_secret_makes_a_secret_that_serve_takes(tmp_path):
    # It reads no settings: the one it replaces may be refused by now.
    made = run("webhooks", "secret", env={"PLANT_STORE_WEBHOOK_SECRET": "old-style"})
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("whsec_") and run("webhooks", "secret").stdout.strip() != secret
    with Server(tmp_path / "data", "--webhook-urls", "http://127.0.0.1:9/hook",
                "--webhook-secret", secret) as server:
        assert server.request("GET", "/health")[0] == 200


def test_a_bad_webhook_secret_is_one_line_that_does_not_show_it(tmp_path):
    secret = "change-me-please-a-long-shared-secret"
    result = run("serve", "--data-dir", str(tmp_path), "--webhook-urls", "http://127.0.0.1:9/",
                 env={"PLANT_STORE_WEBHOOK_SECRET": secret})
    line = one_error_line(result)
    assert "webhook_secret (from environment PLANT_STORE_WEBHOOK_SECRET)" in line
    assert "plant-store webhooks secret" in line and secret not in result.stdout + line


@pytest.mark.slow
def test_operator_mistakes_found_by_the_hostile_pass_are_one_line_each(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        server.request("POST", "/plants", {"id": 1, "name": "Fern"}, token=server.first_token)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "plants.jsonl")
    for args, says in [
        (("serve", "--host", "999.1.1.1", "--store", "memory", "--data-dir", str(tmp_path)),
         "setting host='999.1.1.1' (from flag --host): cannot listen on 999.1.1.1:8080: "),
        (("plants", "get", "+1", "--data-dir", str(data)), "must be an integer"),
        (("plants", "get", "\u0661", "--data-dir", str(data)), "must be an integer"),
        (("token", "add", "--label", "two\nlines", "--data-dir", str(data)), "printable"),
        (("check", "--data-dir", str(fifo)), "plants.jsonl: not a regular file"),
        (("plants", "list", "--data-dir", str(fifo)), "plants.jsonl: not a regular file"),
        (("token", "add", "--label", "a", "--data-dir", str(data / "plants.jsonl")),
         f"setting token_file='{data}/plants.jsonl/tokens.json' (from default): cannot lock"),
    ]:
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert says in one_error_line(result), args
    huge = run_cli("plants", "list", "--limit", "9223372036854775808", "--data-dir", str(data))
    assert huge.returncode == 2 and "is not an integer from 1 to" in huge.stderr
    assert "Traceback" not in huge.stderr


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_plants_list_quietly(tmp_path):
    data = tmp_path / "data"
    with JsonFileStore(str(data)) as store:
        for plant_id in range(20000):
            store.create(Plant(plant_id, "a long enough name " * 4))
    listing = subprocess.Popen([sys.executable, "-m", "plant_store", "plants", "list",
                                "--data-dir", str(data)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert listing.stdout.readline().startswith(b"0\t")
    listing.stdout.close()  # as head -1 does
    assert listing.wait(timeout=30) == 1
    with listing.stderr:
        assert listing.stderr.read() == b""


@pytest.mark.parametrize(("args", "prog", "says"), [
    (("serve", "--prot", "9000"), "plant-store serve",
     "plant-store serve: error: unrecognized arguments: --prot; did you mean --port?"),
    (("serve", "--data_dir=x"), "plant-store serve", "did you mean --data-dir?"),
    (("token", "add", "--lable", "a"), "plant-store token add", "did you mean --label?"),
    (("token", "list", "--port", "1"), "plant-store token list",
     "plant-store token list: error: unrecognized arguments: --port"),
    (("token", "ad"), "plant-store token", "did you mean 'add'?"),
    (("db", "migrat"), "plant-store db", "did you mean 'migrate'?"),
    (("db", "check", "--databse-url", "x"), "plant-store db check",
     "did you mean --database-url?"),
    (("plants", "list", "--limt", "3"), "plant-store plants list", "did you mean --limit?"),
    (("serv",), "plant-store", "did you mean 'serve'?"),
])
def test_a_mistyped_argument_is_told_in_two_lines_by_its_own_command(args, prog, says):
    """The error with its suggestion, then where the command's help is; not the usage
    (33 lines for serve, the error scrolled away above them: issue 50, item 8)."""
    result = run(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    first, second = result.stderr.splitlines()
    assert first.startswith(f"{prog}: error: ") and says in first, result.stderr
    assert second == f"see {prog} --help"


def test_an_unknown_flag_far_from_any_gets_no_suggestion():
    result = run("token", "list", "--xyz")
    assert result.stderr.splitlines() == [
        "plant-store token list: error: unrecognized arguments: --xyz",
        "see plant-store token list --help"]


def test_an_unknown_positional_argument_is_told_by_its_command():
    result = run("token", "list", "extra")
    assert result.stderr.splitlines() == [
        "plant-store token list: error: unrecognized arguments: extra",
        "see plant-store token list --help"]


@pytest.mark.parametrize("command", [
    ("token", "list"), ("token", "add", "--label", "a"), ("check",), ("compact",),
    ("plants", "list"), ("export", "--output", "out.jsonl"), ("webhooks", "list"),
    ("db", "check"),
])
def test_a_setting_a_command_does_not_read_never_makes_it_fail(tmp_path, command):
    data = tmp_path / "data"
    with JsonFileStore(str(data)) as store:
        store.create(Plant(1, "Fern"))
    ini = tmp_path / "a.ini"
    ini.write_text(f"[plant-store]\ndata_dir = {data}\nthreads = many\nlog_level = loud\n"
                   "database_url = postgresql:///nowhere?host=/nonexistent\n")
    env = {**os.environ, "PLANT_STORE_PORT": "80x", "PLANT_STORE_WEBHOOK_URLS": "ftp://x",
           "PLANT_STORE_CONFIG": str(ini)}
    result = subprocess.run([sys.executable, "-m", "plant_store", *command], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    if command[0] == "db":  # it reads database_url, which names no server here
        assert "cannot use database 'nowhere' on" in one_error_line(result)
    else:
        assert result.returncode == 0, result.stderr
    for name in ("port", "threads", "log_level", "webhook_urls"):
        assert f"setting {name}" not in result.stderr


@pytest.mark.parametrize(("command", "env", "says"), [
    (("compact",), {"PLANT_STORE_FSYNC": "maybe"},
     "setting fsync='maybe' (from environment PLANT_STORE_FSYNC): must be true or false"),
    (("check",), {"PLANT_STORE_STORE": "sqlite"}, "setting store='sqlite'"),
    (("check",), {"PLANT_STORE_STORE": "postgresql"},
     "'plant-store check' reads the JSON-file store only"),
])
def test_a_bad_setting_a_command_reads_fails_it_in_one_line(tmp_path, command, env, says):
    result = run(*command, "--data-dir", str(tmp_path), env=env)
    assert says in one_error_line(result)


@pytest.mark.slow
def test_a_second_serve_on_a_held_data_directory_says_at_once_what_it_waits_for(tmp_path):
    data = tmp_path / "data"
    with Server(data) as first:
        second = subprocess.Popen(
            [sys.executable, "-m", "plant_store", "serve", "--port", "0", "--data-dir",
             str(data), "--lock-timeout", "1.5"], stderr=subprocess.PIPE, text=True)
        line = second.stderr.readline()
        waiting = second.poll() is None  # the line came at the start of the wait
        rest = second.communicate(timeout=30)[1]
    assert waiting
    assert line.rstrip().endswith(
        f"WARNING [plant_store.stores.lock] {data} is in use by another plant-store process "
        f"(PID {first.proc.pid}); waiting up to 1.5 s (lock_timeout) for it to let go")
    assert rest == (f"plant-store: error: {data} is in use by another plant-store process "
                    f"(PID {first.proc.pid}); stop it or choose another data directory\n")
