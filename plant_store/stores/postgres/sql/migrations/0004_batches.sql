-- Creates in batches: several plants in one transaction, so a position is no longer the
-- clock's base plus the transaction's id, but the base plus the id times 1024 plus the
-- plant's slot in its batch (queries create, page and rebase).
--
-- The clock is renamed with the change: an instance of an earlier version still running
-- (a rolling upgrade) then fails its creates and lists with an error (a 503, nothing
-- written) instead of handing out positions of the old kind among the new ones.
ALTER TABLE plant_store_clock RENAME TO plant_store_batch_clock;

-- Every position from here on is above every one stored or owed, and above every one a
-- transaction of the old kind may still hold: base + now is the old kind's next.
UPDATE plant_store_batch_clock
SET base = greatest(
        (SELECT coalesce(max(position), 0) FROM plant_store_plants),
        (SELECT coalesce(max(owed_at), 0) FROM plant_store_outbox),
        base + x.now
    ) + 1 - (x.now << 10)
FROM (SELECT pg_current_xact_id()::text::bigint AS now) AS x;
