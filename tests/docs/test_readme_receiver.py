"""The receiver example of the tutorial (docs/tutorial.rst), run as written against a real
server: it takes the server's delivery once, and refuses what did not come from the store
as sent."""

import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest
from standardwebhooks import Webhook

from plant_store.webhooks import worker as webhooks
from support.servers import Server, free_port, http_request, run_cli

TUTORIAL = pathlib.Path(__file__).parents[2] / "docs" / "tutorial.rst"


def receiver_source():
    text = TUTORIAL.read_text("utf-8")
    block = re.search(r"same secret\)::\n\n(.*?)\n\S", text, re.DOTALL).group(1)
    return textwrap.dedent(block)


@pytest.mark.slow
def test_the_tutorial_receiver_verifies_and_dedupes(tmp_path):
    script = tmp_path / "receiver.py"
    script.write_text(receiver_source())
    port = free_port()
    secret = run_cli("webhooks", "secret").stdout.strip()
    env = {"PLANT_STORE_WEBHOOK_SECRET": secret, "PORT": str(port)}
    receiver = subprocess.Popen([sys.executable, str(script)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/"
        with Server(tmp_path / "data", "--webhook-urls", url,
                    env={"PLANT_STORE_WEBHOOK_SECRET": secret}) as server:
            status, _, _ = server.request("POST", "/plants", {"id": 2, "name": "Fern"},
                                          token=server.first_token)
            assert status == 200
            deadline = time.monotonic() + 10
            while run_cli("webhooks", "list", "--data-dir", str(tmp_path / "data")).stdout:
                assert time.monotonic() < deadline, "the delivery was not settled"
                time.sleep(0.1)

        def send(body, headers):
            return http_request("127.0.0.1", port, "POST", "/", body, headers=headers)[0]

        signer, now = Webhook(secret), int(time.time())
        body = b'{"id":3,"name":"Again"}'
        fresh = webhooks.signed(signer, "d3", body, now)
        assert [send(body, fresh), send(body, fresh)] == [204, 204]  # handled once
        old = webhooks.signed(signer, "d4", b'{"id":4,"name":"Old"}', now - 5 * 60 - 1)
        assert send(b'{"id":4,"name":"Old"}', old) == 401  # a replay from long ago
        assert send(b'{"id":5,"name":"Forged"}', fresh) == 401  # another body
        assert send(body, {**fresh, "webhook-id": "d5"}) == 401
        assert send(body, {**fresh, "webhook-signature": "v1,garbage"}) == 401
        assert send(body, {**fresh, "webhook-signature": "sha256=" + "0" * 64}) == 401
        other = webhooks.signed(Webhook(webhooks.new_secret()), "d6", body, now)
        assert send(body, other) == 401  # another store's secret
        assert send(body, {}) == 401
    finally:
        receiver.terminate()
        out, err = receiver.communicate(timeout=10)
    assert out.splitlines() == ["new plant: {'id': 2, 'name': 'Fern'}",
                                "new plant: {'id': 3, 'name': 'Again'}"], err
