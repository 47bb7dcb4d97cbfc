-- Webhook lanes shared by every instance: one holder sends a URL's deliveries, in order.
--
-- A lane is held by one worker (an instance's process) until its lease ends; the holder
-- renews it before each send, so a holder that died or hangs past the lease loses it, and
-- the next worker carries on from the oldest delivery still owed (at least once).
CREATE TABLE plant_store_lanes (
    url text PRIMARY KEY,
    holder text NOT NULL,
    until timestamptz NOT NULL
);

-- Each URL's owed deliveries in order: a lane reads its next ones, and the heads of all
-- URLs are found one index probe per URL, whatever the backlog behind them.
CREATE INDEX plant_store_outbox_lane ON plant_store_outbox (url, owed_at, id) WHERE NOT dead;
