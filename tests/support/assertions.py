"""Assertions on the service's answers."""


def assert_error(response, status):
    """The contract's Error shape: JSON, the status as an int, a non-empty sentence."""
    assert response.status_int == status
    assert response.content_type == "application/json"
    assert set(response.json) == {"error", "message"}
    assert response.json["error"] == status
    assert isinstance(response.json["message"], str) and response.json["message"]
    return response.json["message"]
