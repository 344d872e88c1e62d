-- wrk's script for bench/wait_truth_load.rb: each thread drives one keep-alive connection (-t equal
-- to -c), so its request and response callbacks alternate and the time between them is that
-- request's latency. A share of the requests burn CPU, the rest are quick; every response's path,
-- status, latency (ms, CLOCK_MONOTONIC from just before the write to the whole response parsed)
-- and Server-Timing header go to one tab-separated file per thread.
--   wrk -t C -c C -s bench/wait_truth_load.lua URL -- OUT_DIR SEED QUICK_PATH CPU_PATH CPU_SHARE
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } wait_truth_timespec;
  int clock_gettime(int clock_id, wait_truth_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local now = ffi.new("wait_truth_timespec")
local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, now)
  return tonumber(now.tv_sec) * 1000 + tonumber(now.tv_nsec) / 1e6
end

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

local out, quick_path, cpu_path, cpu_share, sent_ms, path
function init(args)
  out = io.open(args[1] .. "/wrk-" .. thread_number .. ".tsv", "w")
  out:setvbuf("line") -- wrk exits without closing the threads' files
  math.randomseed(tonumber(args[2]) * 1000 + thread_number)
  quick_path, cpu_path, cpu_share = args[3], args[4], tonumber(args[5])
end

function request()
  path = math.random() < cpu_share and cpu_path or quick_path
  sent_ms = now_ms()
  return wrk.format("GET", path)
end

function response(status, headers, body)
  local latency_ms = now_ms() - sent_ms
  local timing = headers["server-timing"] or headers["Server-Timing"] or ""
  out:write(string.format("%s\t%d\t%.3f\t%s\n", path, status, latency_ms, timing))
end
