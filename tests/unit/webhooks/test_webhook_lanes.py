"""Misbehaving subscribers: a whole delivery ends by ``webhook_timeout``, one subscriber's
lane never delays another's, and a stop waits for no subscriber longer than that."""




def test_a_url_with_no_host_fails_like_a_refusal():
    """Config refuses such URLs, but one owed from before that check is an error string,
    not an AttributeError from http.client in the lane's thread (found by mypy)."""
    from plant_store.webhooks.bounded_post import post

    for url in ("http:///plants", "https://:8443/"):
        assert post(url, b"{}", {}, timeout=2) == f"ValueError: {url}: no host"
