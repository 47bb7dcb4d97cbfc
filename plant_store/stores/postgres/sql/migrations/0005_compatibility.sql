-- Which instances a schema still serves, for rolling upgrades: each migration records the
-- oldest migration an instance must know to serve once it is applied (compatible_from).
-- An expand step (a table, a column, an index added: what earlier instances never read
-- changes) leaves it NULL, so instances of the previous release keep serving beside the
-- new ones; a contract step (what an earlier release reads dropped or changed, as 0004's
-- renamed clock did) names its own version, in a '-- compatible-from: N' line of its file,
-- and instances that do not know N say they are not ready (/ready 503) and refuse to
-- start, instead of answering every request with 503 while /ready says 200.
-- This step only adds the column: instances of the release before it serve on.
ALTER TABLE plant_store_schema ADD COLUMN compatible_from integer;
