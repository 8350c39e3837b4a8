-- wrk script for bench/haproxy.sh (bench/cmd/hopbench): a small
-- completions request (POST /v1/completions, JSON body like vLLM's
-- OpenAI API) with an X-Session-ID. Each wrk thread cycles over its share
-- of the sessions (one session per connection on average), so stickiness
-- is exercised on every request. done() prints one machine-readable line.
local sessions = tonumber(os.getenv("HOPBENCH_SESSIONS") or "16")
local threads = {}
local counter = 0
local id = 0

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

local body = '{"model":"m","prompt":"You are a helpful agent. Solve the task step by step, calling tools when needed. ' ..
  'Task: list the files of the repository, read README.md, and summarise the build steps in one paragraph.",' ..
  '"max_tokens":16,"temperature":0.0,"logprobs":0,"stream":false}'

function request()
  counter = counter + 1
  local s = "sess-" .. id .. "-" .. (counter % sessions)
  return wrk.format("POST", "/v1/completions",
    {["Content-Type"] = "application/json", ["X-Session-ID"] = s}, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("HOPBENCH requests=%d duration_us=%d errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
