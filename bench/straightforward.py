"""POST /plants as a competent user would write it in an afternoon: Falcon, marshmallow,
falcon's default JSON media handling, waitress; a dict under a lock or PostgreSQL through
a psycopg pool. The yardstick of ``speed_bench.py``, not part of the service.

Environment: TOKEN (the one bearer token), DATABASE_URL (PostgreSQL; without it, a dict),
PORT (default 0: any free port), THREADS (default 16, as the service's waitress),
SEND_BYTES (waitress's send_bytes; unset: waitress's default, as a user would leave it).
"""

import hmac
import os
import sys
import threading

import falcon
import waitress
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate


class NewPlant(Schema):
    class Meta:
        unknown = EXCLUDE

    id = fields.Int(required=True, strict=True, validate=validate.Range(-2**63, 2**63 - 1))
    name = fields.Str(required=True)
    tag = fields.Str()


class Plant(Schema):
    name = fields.Str()
    tag = fields.Str()


class DictStore:
    def __init__(self):
        self.plants, self.lock = {}, threading.Lock()

    def create(self, plant_id, name, tag):
        """(stored name, stored tag, created)"""
        with self.lock:
            stored = self.plants.setdefault(plant_id, (name, tag))
        return *stored, stored == (name, tag)  # a replay of the same plant counts as "same"


class PostgresStore:
    def __init__(self, url):
        from psycopg_pool import ConnectionPool

        self.pool = ConnectionPool(url, min_size=10, max_size=10, kwargs={"autocommit": True})
        with self.pool.connection() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS plants "
                         "(id bigint PRIMARY KEY, name text NOT NULL, tag text)")

    def create(self, plant_id, name, tag):
        with self.pool.connection() as conn:
            row = conn.execute("INSERT INTO plants (id, name, tag) VALUES (%s, %s, %s) "
                               "ON CONFLICT DO NOTHING RETURNING name, tag",
                               (plant_id, name, tag)).fetchone()
            if row is None:
                row = conn.execute("SELECT name, tag FROM plants WHERE id = %s",
                                   (plant_id,)).fetchone()
        return *row, row == (name, tag)


class BearerToken:
    def __init__(self, token):
        self.expected = f"Bearer {token}".encode()

    def process_request(self, req, resp):
        if not hmac.compare_digest((req.auth or "").encode(), self.expected):
            raise falcon.HTTPUnauthorized(description="A valid bearer token is required.",
                                          challenges=['Bearer realm="plants"'])


class Plants:
    def __init__(self, store):
        self.store, self.new_plant, self.plant = store, NewPlant(), Plant()

    def on_post(self, req, resp):
        try:
            new = self.new_plant.load(req.get_media())
        except ValidationError as exc:
            raise falcon.HTTPBadRequest(description=str(exc.messages)) from None
        name, tag, same = self.store.create(new["id"], new["name"], new.get("tag"))
        if not same:
            raise falcon.HTTPConflict(description=f"Plant {new['id']} exists, different.")
        resp.media = self.plant.dump({"name": name} if tag is None else {"name": name, "tag": tag})


def error_body(req, resp, error):  # the contract's Error shape
    resp.media = {"error": error.status_code, "message": error.description or error.title}


def create_app():
    url = os.environ.get("DATABASE_URL")
    app = falcon.App(middleware=[BearerToken(os.environ["TOKEN"])])
    app.set_error_serializer(error_body)
    app.add_route("/plants", Plants(PostgresStore(url) if url else DictStore()))
    return app


if __name__ == "__main__":
    tuned = {"send_bytes": int(os.environ["SEND_BYTES"])} if "SEND_BYTES" in os.environ else {}
    server = waitress.create_server(create_app(), host="127.0.0.1",
                                    port=int(os.environ.get("PORT", "0")),
                                    threads=int(os.environ.get("THREADS", "16")), **tuned)
    print(f"straightforward listening on http://{server.effective_host}:"
          f"{server.effective_port}", file=sys.stderr, flush=True)
    server.run()
