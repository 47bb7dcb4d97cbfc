-- Plants, and the webhook deliveries their creates owe.
--
-- A plant's position is the id of the transaction that created it: a page lists plants by
-- position, and only below the oldest transaction still running (the snapshot's xmin), so a
-- create that commits late can never land behind a cursor a client already holds. Each
-- create is its own transaction, so positions are unique. Name and tag are UTF-8 bytes:
-- any string is a valid name, NUL included, and PostgreSQL's text cannot hold NUL.
CREATE TABLE plant_store_plants (
    id bigint PRIMARY KEY,
    name bytea NOT NULL,
    tag bytea,
    position bigint NOT NULL UNIQUE
);

-- A delivery is owed until it is delivered (deleted) or dead. ``due`` is when it may next
-- be claimed: now for a new one, the end of a claim's lease while it is being sent, the
-- back-off's end after a failure.
CREATE TABLE plant_store_outbox (
    id text PRIMARY KEY,
    plant_id bigint NOT NULL,
    url text NOT NULL,
    body bytea NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    dead boolean NOT NULL DEFAULT false,
    due timestamptz NOT NULL DEFAULT now(),
    owed_at bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
);
CREATE INDEX plant_store_outbox_due ON plant_store_outbox (due) WHERE NOT dead;
