-- GET /plants?tag=T: each tag's plants in creation order, a page a range of this index.
-- Keyed by the tag's digest, not the tag: a btree entry holds at most about 2,700 bytes,
-- and a tag may be longer (the page query compares the tag itself too).
-- An expand step (an index: what earlier instances read and write is unchanged), so
-- instances of the previous release serve on beside this one. Building it holds writes
-- back while it runs (seconds for a million plants); to avoid that on a large table,
-- build it first, and this step then finds it there:
--   CREATE INDEX CONCURRENTLY plant_store_plants_tag
--       ON plant_store_plants (md5(tag), position) WHERE tag IS NOT NULL;
CREATE INDEX IF NOT EXISTS plant_store_plants_tag
    ON plant_store_plants (md5(tag), position) WHERE tag IS NOT NULL;
