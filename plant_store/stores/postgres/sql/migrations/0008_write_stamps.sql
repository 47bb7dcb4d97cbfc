-- A plant's version also names the history it was written in (issue 49, finding 6): a
-- database restored from a dump (or a base backup) taken before a plant's last update has
-- its position and revision as they were then, and the next update counted the revision
-- on to one a client already held for a later write, whose stale If-Match then matched.
-- So every write is stamped with a random number (60 bits of gen_random_uuid, PostgreSQL
-- 13 and later): a create by the column's default, an update that changes name or tag by
-- 0007's trigger, whichever release writes it. A restore brings back the rows as they
-- were, stamps included (same data, same version), but a write after it draws a new
-- stamp, which no write before it had. Not the transaction id with the cluster's system
-- identifier: a base backup or a point-in-time recovery keeps the identifier and winds
-- the transaction ids back, so the ids the lost writes had are handed out again.
-- An expand step (a column with a constant default, added without a table rewrite; its
-- default for new rows set apart, which rewrites nothing; the trigger's function
-- replaced): instances of the previous release serve on beside this one, and their
-- writes are stamped too. Rows written before it have stamp 0 until their next write.
ALTER TABLE plant_store_plants ADD COLUMN stamp bigint NOT NULL DEFAULT 0;

CREATE FUNCTION plant_store_new_stamp() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || translate(left(gen_random_uuid()::text, 18), '-', ''))::bit(64)::bigint
$$;

ALTER TABLE plant_store_plants ALTER COLUMN stamp SET DEFAULT plant_store_new_stamp();

CREATE OR REPLACE FUNCTION plant_store_next_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := OLD.rev + 1;
    NEW.stamp := plant_store_new_stamp();
    RETURN NEW;
END
$$;
