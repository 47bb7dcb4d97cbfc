"""The receiver example in README.rst, run as written against a real server."""

import pathlib
import re
import subprocess
import sys
import textwrap
import time

from serverproc import Server, free_port, http_request, run_cli

README = pathlib.Path(__file__).parent.parent / "README.rst"


def receiver_source():
    text = README.read_text("utf-8")
    block = re.search(r"same secret\)::\n\n(.*?)\n\S", text, re.DOTALL).group(1)
    return textwrap.dedent(block)


def test_the_readme_receiver_verifies_and_dedupes(tmp_path):
    script = tmp_path / "receiver.py"
    script.write_text(receiver_source())
    port = free_port()
    env = {"PLANT_STORE_WEBHOOK_SECRET": "change-me", "PORT": str(port)}
    receiver = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/"
        with Server(tmp_path / "data", "--webhook-urls", url,
                    "--webhook-secret", "change-me") as server:
            status, _, _ = server.request("POST", "/plants", {"id": 2, "name": "Fern"},
                                          token=server.first_token)
            assert status == 200
            deadline = time.monotonic() + 10
            while run_cli("webhooks", "list", "--data-dir", str(tmp_path / "data")).stdout:
                assert time.monotonic() < deadline, "the delivery was not settled"
                time.sleep(0.1)
        forged = http_request("127.0.0.1", port, "POST", "/", {"id": 3, "name": "x"},
                              headers={"X-Plant-Store-Signature": "sha256=" + "0" * 64,
                                       "X-Plant-Store-Delivery": "forged"})
        assert forged[0] == 401
    finally:
        receiver.terminate()
        out, err = receiver.communicate(timeout=10)
    assert out.splitlines() == ["new plant: {'id': 2, 'name': 'Fern'}"], err
