"""An upgrade on the JSON file, as docs/upgrading.rst tells it (issue 50, item 3): the
previous release's commit (CHANGELOG.rst names it) serves a data directory, its plants
created, updated, deleted and created again and its tokens added and revoked; it is
stopped, and this tree starts on the same data directory. Everything is there, each token
is as it was, and an ETag the previous release gave gets the 412 that says it may come from
an earlier release (it named a plant that had not changed), then a GET and the new ETag
work."""

import os
import re
import subprocess
import sys

import pytest

from support.releases import ROOT, previous_release
from support.servers import Server

# The previous release is unpacked and started: seconds, beside the topology tests.
pytestmark = [pytest.mark.topology, pytest.mark.timeout(300)]


def cli(tree, *args):
    """A ``plant-store`` command of the release in ``tree`` (None: this one)."""
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
    done = subprocess.run([sys.executable, "-m", "plant_store", *args], cwd=tree,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def serve(tree, data):
    """``plant-store serve`` of the release in ``tree`` (None: this one), said at its start."""
    server = Server(data, "--store", "jsonfile", cwd=tree,
                    env={"PYTHONPATH": str(tree)} if tree else None)
    version = re.findall(r'^__version__ = "(.+)"$', ((tree or ROOT) / "plant_store" /
                                                      "__init__.py").read_text(), re.MULTILINE)
    assert f"(version {version[0]}," in "".join(server.stderr), server.stderr
    return server


def everything(server, token, ids=range(1, 7)):
    """Each plant's answer, and the listing."""
    plants = {n: server.request("GET", f"/plants/{n}", token=token)[::2] for n in ids}
    return plants, server.request("GET", "/plants", token=token)[::2]


def test_an_upgrade_on_the_json_file_keeps_every_write_and_token(tmp_path):
    old, data = previous_release(tmp_path), tmp_path / "data"
    server = serve(old, data)
    try:
        token = server.first_token  # made by the previous release's first start
        for n, name in enumerate(["Monstera", "Fern", "Aloe", "Ivy", "Pothos"], 1):
            body = {"id": n, "name": name, **({"tag": "green"} if n % 2 else {})}
            assert server.request("POST", "/plants", body, token)[0] == 200
        _, headers, _ = server.request("GET", "/plants/2", token=token)
        assert server.request("PUT", "/plants/2", {"name": "Boston fern", "tag": "fern"}, token,
                              {"If-Match": headers["ETag"]})[0] == 200
        assert server.request("DELETE", "/plants/3", token=token)[0] == 204
        assert server.request("DELETE", "/plants/4", token=token)[0] == 204
        assert server.request("POST", "/plants", {"id": 4, "name": "English ivy"}, token)[0] == 200
        old_etag = server.request("GET", "/plants/1", token=token)[1]["ETag"]  # unchanged
        before = everything(server, token)
    finally:
        assert server.stop() == 0
    added = cli(old, "token", "add", "--label", "added", "--data-dir", str(data)).split()[-1]
    revoked = cli(old, "token", "add", "--label", "revoked", "--data-dir", str(data)).split()[-1]
    cli(old, "token", "revoke", "revoked", "--data-dir", str(data))
    assert before[0][3][0] == 404 and before[0][2] == (200, {"name": "Boston fern",
                                                             "tag": "fern"}), before
    assert len(before[1][1]) == 4, before

    server = serve(None, data)  # this release, on the same data directory
    try:
        assert everything(server, token) == before
        assert server.request("GET", "/plants", token=added)[0] == 200
        assert server.request("GET", "/plants", token=revoked)[0] == 401
        status, _, body = server.request("PUT", "/plants/1", {"name": "Monstera deliciosa"},
                                         token, {"If-Match": old_etag})
        assert (status, body) == (412, {"error": 412, "message": (
            "Plant 1 is not at that ETag (If-Match): it changed since, or the ETag comes from "
            "an earlier release or another data set; nothing was changed. GET the plant again "
            "for its current ETag.")}), (status, body)
        assert server.request("GET", "/plants/1", token=token, headers={
            "If-None-Match": old_etag})[::2] == (200, {"name": "Monstera", "tag": "green"})
        etag = server.request("GET", "/plants/1", token=token)[1]["ETag"]
        assert etag != old_etag and etag.count(".") == 2, (old_etag, etag)  # a third part
        assert server.request("PUT", "/plants/1", {"name": "Monstera deliciosa"}, token,
                              {"If-Match": etag})[0] == 200
        assert server.request("POST", "/plants", {"id": 6, "name": "Cactus"}, token)[0] == 200
        after = everything(server, token)
    finally:
        assert server.stop() == 0
    server = serve(None, data)  # and again, from what this release wrote
    try:
        assert everything(server, token) == after
    finally:
        assert server.stop() == 0
