-- A plant's version, which its ETag names: its position (each create's own, never reused:
-- a re-created plant has a new one) and its revision, how many times its name or tag has
-- changed since. A trigger counts them, so every writer does, whatever it runs: an instance
-- of the release before this one (a rolling upgrade) updates plants without knowing the
-- column, and its updates still move the version on. A write that leaves name and tag as
-- they were (a replay, a retried update) keeps the version.
-- An expand step (a column with a constant default, added without a table rewrite, and a
-- trigger): instances of the previous release serve on beside this one.
ALTER TABLE plant_store_plants ADD COLUMN rev bigint NOT NULL DEFAULT 0;

CREATE FUNCTION plant_store_next_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := OLD.rev + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER plant_store_revision BEFORE UPDATE ON plant_store_plants FOR EACH ROW
    WHEN ((OLD.name, OLD.tag) IS DISTINCT FROM (NEW.name, NEW.tag))
    EXECUTE FUNCTION plant_store_next_revision();
