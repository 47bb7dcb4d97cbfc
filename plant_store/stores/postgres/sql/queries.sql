-- Named queries of the PostgreSQL store: each starts with a "-- name: <name>" line.

-- name: create
-- One statement, so one round trip and one transaction: the plant and the deliveries it
-- owes are written together or not at all. Answers (true) when it created the plant,
-- (false, name, tag) when the id was stored, and no row when a create of the same id
-- committed after this statement's snapshot was taken (the caller runs it again).
WITH new AS (
    INSERT INTO plant_store_plants (id, name, tag, position)
    VALUES (%(id)s, %(name)s, %(tag)s, pg_current_xact_id()::text::bigint)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), owed AS (
    INSERT INTO plant_store_outbox (id, plant_id, url, body)
    SELECT d.id, %(id)s, d.url, %(body)s
    FROM unnest(%(delivery_ids)s::text[], %(urls)s::text[]) AS d (id, url)
    WHERE EXISTS (SELECT FROM new)
)
SELECT true AS created, NULL AS name, NULL AS tag FROM new
UNION ALL
SELECT false, name, tag FROM plant_store_plants
WHERE id = %(id)s AND NOT EXISTS (SELECT FROM new);

-- name: delete
DELETE FROM plant_store_plants WHERE id = %(id)s;

-- name: get
SELECT name, tag FROM plant_store_plants WHERE id = %(id)s;

-- name: page
-- Only below the horizon: every transaction with a smaller id has ended, so nothing can
-- appear later before the positions listed.
SELECT id, name, tag, position FROM plant_store_plants
WHERE position >= %(start)s
  AND position < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
ORDER BY position
LIMIT %(limit)s;

-- name: count
SELECT count(*) FROM plant_store_plants;

-- name: due
-- Deliveries owed and due, oldest first: new ones, and failed ones past their back-off.
SELECT id, plant_id, url, body, attempts, error, dead FROM plant_store_outbox
WHERE NOT dead AND due <= now()
ORDER BY owed_at, id
LIMIT 1000;

-- name: claim
-- Lease one delivery to this worker just before it is sent: another instance skips it
-- (SKIP LOCKED while this runs, ``due`` after) and takes it over only if the lease runs
-- out (the claimant died mid-delivery: at least once, with the same delivery id).
UPDATE plant_store_outbox SET due = now() + make_interval(secs => %(lease)s)
WHERE id IN (
    SELECT id FROM plant_store_outbox
    WHERE id = %(id)s AND NOT dead AND due <= now()
    FOR UPDATE SKIP LOCKED
);

-- name: dead
SELECT id, plant_id, url, body, attempts, error, dead FROM plant_store_outbox
WHERE dead ORDER BY owed_at, id;

-- name: outbox_counts
-- For the metrics: deliveries owed (due or not) and dead letters.
SELECT count(*) FILTER (WHERE NOT dead), count(*) FILTER (WHERE dead) FROM plant_store_outbox;

-- name: probe
-- Whether the database would refuse writes (a standby, or made read-only).
SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on';

-- name: delivered
DELETE FROM plant_store_outbox WHERE id = %(id)s;

-- name: failed
UPDATE plant_store_outbox
SET attempts = attempts + 1, error = %(error)s, dead = %(dead)s,
    due = now() + make_interval(secs => %(retry_in)s)
WHERE id = %(id)s;

-- name: retry
UPDATE plant_store_outbox SET attempts = 0, error = NULL, dead = false, due = now()
WHERE id = %(id)s;
