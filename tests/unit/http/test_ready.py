"""Readiness: ``/ready`` answers 200 only while the store can take writes, and 503 in the
Error shape naming why; ``/health`` (liveness) stays 200 all the while. Over real HTTP
where the fault is real: a data file replaced under the server, a PostgreSQL server stopped
and started, a database made read-only."""

from plant_store import __version__


def test_ready_needs_no_token_and_says_ready(app):
    response = app.get("/ready", headers={"Authorization": ""}, status=200)
    assert response.content_type == "application/json"
    assert response.json == {"status": "ready", "version": __version__}
    assert app.head("/ready", headers={"Authorization": ""}, status=200).body == b""


