-- Positions that survive moves, deletes whose outcome can be settled, and a probe.
--
-- A plant's position is the clock's base plus the id of the transaction that created it
-- (0001 used the id alone). Transaction ids restart low in a new cluster (pg_dump and
-- pg_restore, a major upgrade, a logical move) and may be handed out again after a
-- promotion that lost transactions. The clock row says on which server and timeline its
-- base holds; a statement that finds itself elsewhere writes nothing and answers "stale",
-- and the store then moves the base past every position ever handed out (query rebase).
CREATE TABLE plant_store_clock (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    base bigint NOT NULL,
    system_identifier bigint NOT NULL,
    timeline integer NOT NULL
);

-- Where a statement runs: the cluster's identity and, on a primary, its timeline (NULL on
-- a standby, which cannot take writes anyway).
CREATE VIEW plant_store_here AS
SELECT s.system_identifier,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
       END AS timeline
FROM pg_control_system() AS s;

-- The data was written on this server: keep positions as they are (base 0), unless they
-- are already ahead of its transaction ids (a 0001 database restored elsewhere).
INSERT INTO plant_store_clock (base, system_identifier, timeline)
SELECT CASE WHEN p.top < x.now THEN 0 ELSE p.top + 4294967296 - x.now END,
       h.system_identifier, h.timeline
FROM plant_store_here AS h,
     (SELECT coalesce(max(position), 0) AS top FROM plant_store_plants) AS p,
     (SELECT pg_current_xact_id()::text::bigint AS now) AS x;

-- Each delete notes a random token of its own, so that a delete whose connection broke can
-- be asked again ("did this token delete it?") instead of answering 404 for its own work.
-- Tokens are forgotten after a few minutes (query forget_deletes).
CREATE TABLE plant_store_deletes (
    token uuid PRIMARY KEY,
    deleted boolean NOT NULL,
    noted_at timestamptz NOT NULL DEFAULT now()
);

-- /ready writes here: a write that commits is the only proof that writes can commit (a
-- synchronous standby confirms it, the server is not read-only).
CREATE TABLE plant_store_probe (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at timestamptz NOT NULL
);
