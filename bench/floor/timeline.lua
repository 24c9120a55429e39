-- post.lua, and answers counted per second of the run: done() prints "second <unix time> <answers>" lines.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY"), "r"); wrk.body = f:read("*a"); f:close()

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  answers = {}
end

function response(status, headers, body)
  local now = os.time()
  answers[now] = (answers[now] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for second, count in pairs(thread:get("answers")) do
      total[second] = (total[second] or 0) + count
    end
  end
  for second, count in pairs(total) do
    io.write(string.format("second %d %d\n", second, count))
  end
end
