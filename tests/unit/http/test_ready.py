"""Readiness: ``/ready`` answers 200 only while the store can take writes, and 503 in the
Error shape naming why; ``/health`` (liveness) stays 200 all the while. Over real HTTP
where the fault is real: a data file replaced under the server, a PostgreSQL server stopped
and started, a database made read-only."""

import webtest

from plant_store import __version__
from plant_store.app import create_app
from plant_store.config import Config
from plant_store.http import operational
from plant_store.stores import MemoryStore
from plant_store.tokens import TokenFile


def test_ready_needs_no_token_and_says_ready(app):
    response = app.get("/ready", headers={"Authorization": ""}, status=200)
    assert response.content_type == "application/json"
    assert response.json == {"status": "ready", "version": __version__}
    assert app.head("/ready", headers={"Authorization": ""}, status=200).body == b""




def test_an_unreadable_token_file_is_named_without_its_path(tmp_path, caplog):
    """The hostile pass on issue 52's third round: /ready, which anyone may ask, answered
    the token file's path and the parser's words; they are the operator's, in the log."""
    path = tmp_path / "secret-place" / "tokens.json"
    path.parent.mkdir()
    tokens = TokenFile(str(path))
    tokens.add("t")
    path.write_text("{not json")
    app = webtest.TestApp(create_app(Config(store="memory"), store=MemoryStore(),
                                     tokens=tokens))
    body = app.get("/ready", status=503).json
    assert body == {"error": 503, "message": operational.TOKENS_UNREADABLE}
    assert "secret-place" not in body["message"]
    assert any("secret-place" in record.getMessage() for record in caplog.records)
