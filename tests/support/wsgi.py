"""Requests straight to a WSGI callable, with no server."""

import json

import falcon.testing


def call(app, path="/ready"):
    """One request straight to a WSGI callable: (status code, JSON body)."""
    answer = {}
    body = b"".join(app(falcon.testing.create_environ(path),
                        lambda status, headers: answer.update(status=int(status[:3]))))
    return answer["status"], json.loads(body)
