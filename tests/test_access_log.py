import logging


def test_one_line_per_request_without_token_or_body(app, token, caplog):
    caplog.set_level(logging.INFO, logger="plant_store.access")
    app.post_json("/plants", {"id": 1, "name": "secret-name"}, status=200)
    app.get("/nope", status=404)
    lines = [r.getMessage() for r in caplog.records if r.name == "plant_store.access"]
    assert len(lines) == 2
    method, path, status, duration = lines[0].split()[1:]
    assert (method, path, status) == ("POST", "/plants", "200")
    assert duration.endswith("ms") and float(duration[:-2]) >= 0
    assert lines[1].split()[1:4] == ["GET", "/nope", "404"]
    assert token not in caplog.text and "secret-name" not in caplog.text


def test_rejected_requests_are_logged_too(app, caplog):
    caplog.set_level(logging.INFO, logger="plant_store.access")
    app.extra_environ = {}
    app.post_json("/plants", {"id": 1, "name": "x"}, status=401)
    assert [r.getMessage().split()[1:4] for r in caplog.records] == [["POST", "/plants", "401"]]
