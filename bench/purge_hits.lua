-- wrk script of the purge scenario: counts the answers by the 10 ms of wall-clock time
-- (CLOCK_REALTIME) in which they arrived, so that the hits served while a purge ran can
-- be told from the others of the same run; done() prints "BUCKET <centiseconds> <count>"
-- lines, and "STATUS <non-200 answers>".
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } umbra_bench_ts;
int clock_gettime(int clk, umbra_bench_ts *ts);
]]
local ts = ffi.new("umbra_bench_ts")
local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

counts = {}
bad = 0

function response(status, headers, body)
    ffi.C.clock_gettime(0, ts)
    local k = tonumber(ts.tv_sec) * 100 + math.floor(tonumber(ts.tv_nsec) / 10000000)
    counts[k] = (counts[k] or 0) + 1
    if status ~= 200 then bad = bad + 1 end
end

function done(summary, latency, requests)
    local all, nbad = {}, 0
    for _, t in ipairs(threads) do
        for k, v in pairs(t:get("counts")) do
            all[k] = (all[k] or 0) + v
        end
        nbad = nbad + t:get("bad")
    end
    for k, v in pairs(all) do
        io.write(string.format("BUCKET %d %d\n", k, v))
    end
    io.write(string.format("STATUS %d\n", nbad))
end
