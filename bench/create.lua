-- wrk script: POST /plants (or $PLANTS_PATH) with a fresh id on every request, then print a
-- JSON summary.
-- Ids: each thread counts up from its own base (ID_BASE + thread number * 10^9).
local threads = {}
local counter = 0

function setup(thread)
   thread:set("base", tonumber(os.getenv("ID_BASE") or "0") + counter * 1000000000)
   counter = counter + 1
   table.insert(threads, thread)
end

function init(args)
   next_id = base
   headers = {
      ["Authorization"] = "Bearer " .. os.getenv("TOKEN"),
      ["Content-Type"] = "application/json",
   }
end

function request()
   next_id = next_id + 1
   local body = string.format('{"id": %d, "name": "plant %d", "tag": "bench"}', next_id, next_id)
   return wrk.format("POST", os.getenv("PLANTS_PATH") or "/plants", headers, body)
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "non_2xx": %d, ' ..
      '"socket_errors": %d}\n',
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
      e.status, e.connect + e.read + e.write + e.timeout))
end
