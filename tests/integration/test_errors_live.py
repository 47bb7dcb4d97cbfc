"""The real-server half of tests/unit/http/test_errors.py: errors outside the POST table still
come back in the Error shape."""





def test_head_answers_wherever_get_does(tmp_path):
    """Over waitress: the GET answer's status and headers, without a body."""
    import http.client

    from support.servers import Server

    with Server(tmp_path) as server:
        token = server.first_token
        for path, auth in [("/health", None), ("/openapi.json", None), ("/plants", token)]:
            conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
            conn.request("HEAD", path, headers={"Authorization": f"Bearer {auth}"} if auth
                         else {})
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b""), path
            assert response.getheader("Content-Type") == "application/json"
            conn.close()
