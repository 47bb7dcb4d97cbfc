-- Named queries of the PostgreSQL store: each starts with a "-- name: <name>" line.

-- name: create
-- A batch of creates (batches.py) in one statement, so one round trip and one transaction:
-- the plants and the deliveries they owe are written together or not at all. The ids are
-- distinct (the store settles repeats within a batch itself), and rows are inserted in id
-- order, so two batches with ids in common wait for each other in one order, never in a
-- cycle. Answers (id, created, name, tag) for each: created true when this statement stored
-- the plant, false with the stored name and tag when the id was there; a single row of
-- NULLs when the clock is stale (the store rebases and runs it again).
-- Positions: the clock's base plus the transaction's id times 1024, plus the slot (the
-- call's place in the batch, in arrival order, below 1024). On a stored id, DO UPDATE
-- changes nothing but writes: the row is locked and read at its latest version (even one
-- committed after this statement's snapshot), and the commit waits for a synchronous
-- standby as a create's does. So a replay, the retry of a create whose connection broke,
-- answers only once the plant is durable as configured.
-- lock_timeout: a batch waits that long at most for a row another transaction holds (an
-- open transaction on one of its ids must not hold its neighbours back); it is set for
-- this statement's own transaction, before the first row is inserted (NULL for a create
-- alone: the role's own lock_timeout, if any, else no bound but the statement's).
WITH clock AS (
    SELECT c.base, set_config('lock_timeout',
                              coalesce(%(lock_timeout)s, current_setting('lock_timeout')), true)
    FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
        ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline
), new AS (
    SELECT n.id, n.name, n.tag,
           clock.base + (pg_current_xact_id()::text::bigint << 10) + n.slot - 1 AS position
    FROM clock, unnest(%(ids)s::bigint[], %(names)s::bytea[], %(tags)s::bytea[])
        WITH ORDINALITY AS n (id, name, tag, slot)
), plant AS (
    INSERT INTO plant_store_plants AS p (id, name, tag, position)
    SELECT id, name, tag, position FROM new ORDER BY id
    ON CONFLICT (id) DO UPDATE SET name = p.name
    RETURNING p.id, p.name, p.tag, p.position
), done AS (
    SELECT plant.id, plant.name, plant.tag, plant.position,
           plant.position = new.position AS created
    FROM plant JOIN new USING (id)
), owed AS (
    INSERT INTO plant_store_outbox (id, plant_id, url, body, owed_at)
    SELECT d.id, d.plant_id, d.url, d.body, done.position
    FROM unnest(%(delivery_ids)s::text[], %(delivery_plants)s::bigint[], %(urls)s::text[],
                %(bodies)s::bytea[]) AS d (id, plant_id, url, body)
    JOIN done ON done.id = d.plant_id AND done.created
)
SELECT id, created, name, tag FROM done
UNION ALL
SELECT NULL, NULL, NULL, NULL WHERE NOT EXISTS (SELECT FROM clock);

-- name: create_one
-- The batch of one (a lone create, or a member gone alone): the create above for one plant
-- with plain parameters, which costs less than the arrays (a lone client's latency). Same
-- answers, and the same lock_timeout: a lone create waiting on a held row must not keep
-- the batches waiting behind it (NULL once it runs alone, outside them: the role's own).
WITH clock AS (
    SELECT c.base, set_config('lock_timeout',
                              coalesce(%(lock_timeout)s, current_setting('lock_timeout')), true)
    FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
        ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline
), mine AS (
    SELECT base + (pg_current_xact_id()::text::bigint << 10) AS position FROM clock
), plant AS (
    INSERT INTO plant_store_plants AS p (id, name, tag, position)
    SELECT %(id)s, %(name)s, %(tag)s, position FROM mine
    ON CONFLICT (id) DO UPDATE SET name = p.name
    RETURNING p.name, p.tag, p.position = (SELECT position FROM mine) AS created
), owed AS (
    INSERT INTO plant_store_outbox (id, plant_id, url, body, owed_at)
    SELECT d.id, %(id)s, d.url, %(body)s, mine.position
    FROM mine, unnest(%(delivery_ids)s::text[], %(urls)s::text[]) AS d (id, url)
    WHERE (SELECT created FROM plant)
)
SELECT %(id)s, created, name, tag FROM plant
UNION ALL
SELECT NULL, NULL, NULL, NULL WHERE NOT EXISTS (SELECT FROM clock);

-- name: import_position
-- The first position of this transaction's slots, as query import makes them (the xid is
-- assigned here, so the general way after a failed direct copy keeps it); no row when the
-- clock is stale.
SELECT c.base + (pg_current_xact_id()::text::bigint << 10)
FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
    ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline;

-- name: import_direct
-- An import's batch when none of its ids is stored, the usual case: copied straight into
-- the table at the positions import_position gave (a third less time than the general
-- way). A stored id fails it with a unique violation, and the store then goes the
-- general way (import_table, import_copy, import) in the same transaction.
COPY plant_store_plants (id, name, tag, position) FROM STDIN (FORMAT BINARY);

-- name: import_table
-- An import's batch (create_many): its plants are copied here (import_copy), then created
-- by query import, all in one transaction that starts with this statement, so a pooler
-- in transaction mode may run each on another session: the table is made there if it is
-- not yet (dropping it at each commit instead cost 2.5 ms a transaction), and emptied by
-- the commit or the rollback.
CREATE TEMPORARY TABLE IF NOT EXISTS plant_store_import (
    slot integer NOT NULL,
    id bigint NOT NULL,
    name bytea NOT NULL,
    tag bytea
) ON COMMIT DELETE ROWS;

-- name: import_copy
COPY plant_store_import (slot, id, name, tag) FROM STDIN (FORMAT BINARY);

-- name: import
-- Creates the plants copied into plant_store_import: the create above, for at most 1024
-- distinct ids (a transaction's slots) copied in this transaction, without webhooks (an
-- imported plant is moved, not new). Positions: the slot is the plant's place in the
-- batch, the file's order. A stored id is locked at its latest version, as a create's
-- replay is, but its row is rewritten only when it holds another plant (a conflict), so
-- that resuming an import does not rewrite every plant it already made: the lock alone is
-- written ahead, so the commit still waits for a synchronous standby, and answers once
-- the replayed plant is durable as configured.
-- Answers only the plants it did not create, by slot: a replay as (slot, NULL, NULL,
-- true), a conflict with the stored name and tag and false (the store then rolls the
-- transaction back); a single row of NULLs when the clock is stale.
WITH clock AS (
    SELECT c.base FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
        ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline
), new AS (
    SELECT n.slot, n.id, n.name, n.tag,
           clock.base + (pg_current_xact_id()::text::bigint << 10) + n.slot AS position
    FROM clock, plant_store_import AS n
), plant AS (
    INSERT INTO plant_store_plants AS p (id, name, tag, position)
    SELECT id, name, tag, position FROM new ORDER BY id
    ON CONFLICT (id) DO UPDATE SET name = p.name
    WHERE (p.name, p.tag) IS DISTINCT FROM (excluded.name, excluded.tag)
    RETURNING p.id, p.name, p.tag, p.position
)
SELECT new.slot, plant.name, plant.tag, plant.id IS NULL
FROM new LEFT JOIN plant USING (id)
WHERE plant.position IS DISTINCT FROM new.position
UNION ALL
SELECT NULL, NULL, NULL, NULL WHERE NOT EXISTS (SELECT FROM clock)
ORDER BY 1;

-- name: delete
-- Deletes the plant unless this token already did (a retry after a broken connection),
-- and notes the token; answers whether the token deleted it, now or before. The token is
-- written whatever the outcome, so every answer, "not found" included, waits for a
-- synchronous standby: a plant another session deleted, committed here but not yet
-- confirmed there, is not called gone before it is. A conditional delete (If-Match) names
-- the version the store checked (was_position, was_rev, was_stamp): a plant changed since, or
-- deleted and created again, is kept, and the store reads it again and decides anew.
WITH prior AS (
    SELECT deleted FROM plant_store_deletes WHERE token = %(token)s
), gone AS (
    DELETE FROM plant_store_plants
    WHERE id = %(id)s AND NOT EXISTS (SELECT FROM prior)
      AND (NOT %(conditional)s OR (position = %(was_position)s AND rev = %(was_rev)s
                                   AND stamp = %(was_stamp)s))
    RETURNING id
)
INSERT INTO plant_store_deletes AS d (token, deleted)
VALUES (%(token)s, EXISTS (SELECT FROM gone) OR coalesce((SELECT deleted FROM prior), false))
ON CONFLICT (token) DO UPDATE SET noted_at = excluded.noted_at
RETURNING d.deleted;

-- name: update
-- Compare and set: the plant's new name and tag, written only if it is still the version
-- the store read (was_position, was_rev, was_stamp) or already as asked. So two conditional updates
-- that read the same version cannot both win (the second waits for the first's row lock,
-- then finds the row changed: no row, and the store reads it again and decides anew), and
-- a retry after a broken connection meets its own earlier write and answers as it would
-- have. A plant already as asked is written over with itself (the revision trigger leaves
-- its version): the commit then waits for a synchronous standby, so a retried update is
-- not confirmed before the first one is. The position is never touched: an updated plant
-- keeps its place in the listing. Answers the version written.
UPDATE plant_store_plants
SET name = %(name)s, tag = %(tag)s
WHERE id = %(id)s
  AND ((position = %(was_position)s AND rev = %(was_rev)s AND stamp = %(was_stamp)s)
       OR (name = %(name)s AND tag IS NOT DISTINCT FROM %(tag)s))
RETURNING position, rev, stamp;

-- name: forget_deletes
-- Tokens outlive any retry of their delete by far (a retry ends within the deadline).
DELETE FROM plant_store_deletes WHERE noted_at < now() - interval '10 minutes';

-- name: get
SELECT name, tag, position, rev, stamp FROM plant_store_plants WHERE id = %(id)s;

-- name: page
-- Only below the horizon: every transaction with a smaller id has ended, so nothing can
-- appear later before the positions listed. A row of NULLs (sorted last) says the clock
-- is stale: the store rebases and asks again.
WITH clock AS (
    SELECT c.base FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
        ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline
)
(SELECT p.id, p.name, p.tag, p.position FROM plant_store_plants AS p, clock
 WHERE p.position >= %(start)s
   AND p.position < clock.base + (pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 10)
 ORDER BY p.position
 LIMIT %(limit)s)
UNION ALL
SELECT NULL, NULL, NULL, NULL WHERE NOT EXISTS (SELECT FROM clock)
ORDER BY 4;

-- name: page_tag
-- The page above, of the plants whose tag has the digest of the one asked for: a range
-- scan of the index on (md5(tag), position), so a page costs its length whatever the table
-- holds. The store drops the rows of another tag with the same digest (one made so on
-- purpose) and asks on: a "p.tag = ..." here would be counted by the planner as a second
-- condition as selective as the first, and the tiny estimate made it sort a whole tag's
-- rows for each page. For the same reason the range is a row comparison, in the index's
-- own order: only an index scan in that order can take it, never a bitmap scan and a sort
-- (which the planner chose at times for a rare tag, at a cost growing with the tag).
-- Only below the horizon: every transaction with a smaller id has ended, so nothing can
-- appear later before the positions listed. A row of NULLs (sorted last) says the clock
-- is stale: the store rebases and asks again.
WITH clock AS (
    SELECT c.base FROM plant_store_batch_clock AS c JOIN plant_store_here AS h
        ON c.system_identifier = h.system_identifier AND c.timeline = h.timeline
)
(SELECT p.id, p.name, p.tag, p.position FROM plant_store_plants AS p, clock
 WHERE (md5(p.tag), p.position) >= (md5(%(tag)s), %(start)s) AND md5(p.tag) <= md5(%(tag)s)
   AND p.position < clock.base + (pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 10)
 ORDER BY md5(p.tag), p.position
 LIMIT %(limit)s)
UNION ALL
SELECT NULL, NULL, NULL, NULL WHERE NOT EXISTS (SELECT FROM clock)
ORDER BY 4;

-- name: rebase
-- This data set now lives on another server or timeline: move the base so that every
-- position handed out from here on is above every position stored, and above every one
-- the old server may have handed out and lost (2^32 transactions of margin, 1024
-- positions each). Positions stay below 10^18 (a cursor's 18 digits) for over 200,000
-- moves. Two instances rebasing at once: the second finds the row moved (DO UPDATE reads
-- its latest version) and leaves it. With ``force``, the move is made whatever the clock
-- says: for an operator who started a physical backup or a disk snapshot as the primary,
-- which keeps the server's identity and timeline ('plant-store db rebase').
INSERT INTO plant_store_batch_clock AS c (base, system_identifier, timeline)
SELECT greatest(
           (SELECT coalesce(max(position), 0) FROM plant_store_plants),
           (SELECT coalesce(max(owed_at), 0) FROM plant_store_outbox),
           coalesce((SELECT base FROM plant_store_batch_clock), 0) + x.now
       ) + (4294967296 << 10) - x.now,
       h.system_identifier, h.timeline
FROM plant_store_here AS h, (SELECT pg_current_xact_id()::text::bigint << 10 AS now) AS x
WHERE h.timeline IS NOT NULL
ON CONFLICT (one) DO UPDATE
SET base = excluded.base, system_identifier = excluded.system_identifier,
    timeline = excluded.timeline
WHERE %(force)s
   OR (c.system_identifier, c.timeline) <> (excluded.system_identifier, excluded.timeline);

-- name: count
SELECT count(*) FROM plant_store_plants;

-- name: due
-- Deliveries owed and due, oldest first: new ones, and failed ones past their back-off.
SELECT id, plant_id, url, body, attempts, error, dead FROM plant_store_outbox
WHERE NOT dead AND due <= now()
ORDER BY owed_at, id
LIMIT 1000;

-- name: lanes
-- The URLs whose oldest owed delivery is due and whose lane no other worker holds: a skip
-- scan of the lane index, one probe per URL, so a backlog behind one URL costs nothing here.
WITH RECURSIVE heads AS (
    (SELECT url, due FROM plant_store_outbox WHERE NOT dead ORDER BY url, owed_at, id LIMIT 1)
    UNION ALL
    SELECT next.url, next.due FROM heads, LATERAL (
        SELECT url, due FROM plant_store_outbox
        WHERE NOT dead AND url > heads.url
        ORDER BY url, owed_at, id LIMIT 1
    ) AS next
)
SELECT url FROM heads
WHERE due <= now() AND NOT EXISTS (
    SELECT FROM plant_store_lanes AS l
    WHERE l.url = heads.url AND l.holder <> %(holder)s AND l.until > now()
);

-- name: lane
-- A URL's next deliveries, oldest first; the last column says whether each is due.
SELECT id, plant_id, url, body, attempts, error, dead, due <= now() FROM plant_store_outbox
WHERE url = %(url)s AND NOT dead
ORDER BY owed_at, id
LIMIT %(limit)s;

-- name: hold_lane
-- Take a free or expired lane, or renew this holder's; no row when another holds it.
INSERT INTO plant_store_lanes AS l (url, holder, until)
VALUES (%(url)s, %(holder)s, now() + make_interval(secs => %(lease)s))
ON CONFLICT (url) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE l.holder = excluded.holder OR l.until <= now()
RETURNING true;

-- name: begin_attempt
-- Count an attempt before it is made, while this holder's lease on the lane lasts, and
-- renew the lease: one statement, so no two workers both make a last try, and a worker
-- whose lease ran out (a slow outcome's write) sends nothing. Answers the attempt's
-- number (max + 1: the tries are used up), and whether the lane is still held.
WITH lane AS (
    UPDATE plant_store_lanes SET until = now() + make_interval(secs => %(lease)s)
    WHERE url = %(url)s AND holder = %(holder)s AND until > now()
    RETURNING true
), counted AS (
    UPDATE plant_store_outbox
    SET attempts = attempts + 1, due = now() + make_interval(secs => %(lease)s)
    WHERE id = %(id)s AND NOT dead AND attempts < %(max)s AND EXISTS (SELECT FROM lane)
    RETURNING attempts
)
SELECT coalesce((SELECT attempts FROM counted), %(max)s + 1), EXISTS (SELECT FROM lane);

-- name: free_lane
DELETE FROM plant_store_lanes WHERE url = %(url)s AND holder = %(holder)s;

-- name: dead
SELECT id, plant_id, url, body, attempts, error, dead FROM plant_store_outbox
WHERE dead ORDER BY owed_at, id;

-- name: outbox_counts
-- For the metrics: deliveries owed (due or not) and dead letters.
SELECT count(*) FILTER (WHERE NOT dead), count(*) FILTER (WHERE dead) FROM plant_store_outbox;

-- name: probe
-- Readiness: a write that must commit, as a create's would (a synchronous standby confirms
-- it); a standby or a read-only server refuses it.
INSERT INTO plant_store_probe AS p (at) VALUES (now())
ON CONFLICT (one) DO UPDATE SET at = excluded.at;

-- name: statement_timeout
-- In milliseconds; 0 is none: the session's, and every new session's (reset_val: the
-- server's, the database's or the role's, never a SET's).
SELECT setting::bigint, reset_val::bigint FROM pg_settings WHERE name = 'statement_timeout';

-- name: set_statement_timeout
SELECT set_config('statement_timeout', %(ms)s, false);

-- name: delivered
DELETE FROM plant_store_outbox WHERE id = %(id)s;

-- name: failed
-- The attempt was counted by begin_attempt.
UPDATE plant_store_outbox
SET error = %(error)s, dead = %(dead)s, due = now() + make_interval(secs => %(retry_in)s)
WHERE id = %(id)s;

-- name: retry
UPDATE plant_store_outbox SET attempts = 0, error = NULL, dead = false, due = now()
WHERE id = %(id)s;

-- name: outbox
-- What 'plant-store webhooks list' shows: every delivery, owed (due or not) then dead, each
-- oldest first.
SELECT id, plant_id, url, body, attempts, error, dead FROM plant_store_outbox
ORDER BY dead, owed_at, id;

-- name: retry_dead
-- An operator's retry, whole or not at all, in one transaction: the dead letters (all, when
-- ids is NULL, or those named) are locked, and moved back to the outbox, attempts reset and
-- due now, only if every id named is among them. The running instances' workers then see
-- them in their lanes and send each once (lane leases, begin_attempt). Two retries at once:
-- the second waits for the first's locks and finds the rows no longer dead (FOR UPDATE reads
-- their latest version), so a dead letter is moved once. Answers the dead letters found and
-- those moved.
WITH chosen AS (
    SELECT id FROM plant_store_outbox
    WHERE dead AND (%(ids)s::text[] IS NULL OR id = ANY(%(ids)s::text[]))
    ORDER BY id
    FOR UPDATE
), whole AS (
    SELECT %(ids)s::text[] IS NULL OR count(*) = cardinality(%(ids)s::text[]) AS ok
    FROM chosen
), moved AS (
    UPDATE plant_store_outbox AS o SET attempts = 0, error = NULL, dead = false, due = now()
    FROM chosen, whole
    WHERE o.id = chosen.id AND whole.ok
    RETURNING o.id
)
SELECT coalesce((SELECT array_agg(id) FROM chosen), '{}'),
       coalesce((SELECT array_agg(id) FROM moved), '{}');
