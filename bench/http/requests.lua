-- SPDX-License-Identifier: Apache-2.0
-- wrk script for scripts/bench http: wrk ... -s requests.lua -- MODE PREFIX [NKEYS]
-- MODE: passthrough (POST, no key) | fresh (a new key per request) | replay (cycles NKEYS keys
-- "replay-0".."replay-N-1", already completed) | conflict (cycles 8 keys PREFIX-0..7 on /slow/).
-- done() prints one "BENCHJSON {...}" line that the driver parses.
local body = '{"amount":"100000","currency":"usd","customer":"cus_bench"}'
local mode, prefix, nkeys = "passthrough", "k", 1000
local counter = 0
local thread_count = 0

function setup(thread)
  thread:set("tid", thread_count)
  thread_count = thread_count + 1
end

function init(args)
  mode = args[1] or mode
  prefix = args[2] or prefix
  nkeys = tonumber(args[3] or nkeys)
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  if mode == "passthrough" then
    request = nil  -- wrk sends its prebuilt static request
  else
    wrk.headers["Authorization"] = "Bearer sk_bench"
  end
end

local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer sk_bench"}

function request()
  counter = counter + 1
  local path = "/v1/payments"
  if mode == "fresh" then
    headers["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. counter
  elseif mode == "replay" then
    headers["Idempotency-Key"] = "replay-" .. (counter % nkeys)
  elseif mode == "conflict" then
    headers["Idempotency-Key"] = prefix .. "-" .. (counter % 8)
    path = "/slow/payments"
  end
  return wrk.format("POST", path, headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"status_errors":%d,"connect":%d,' ..
    '"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
