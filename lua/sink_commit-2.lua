--[[
  sink_commit: the Spark sink's driver marks a micro-batch finished on one partition, once
  every Spark task of it succeeded. A replay of it then writes nothing, and the
  batch's per-partition dedupe state is dropped.

  KEYS[1]  the partition metadata (hash)        <ns>:{<topic>/<p>}:part
  KEYS[2]  the sink state of the app (hash)     <ns>:{<topic>/<p>}:sink:<app>
  ARGV[1]  inc      the partition incarnation the caller saw
  ARGV[2]  query    the streaming query id
  ARGV[3]  batch    the micro-batch id
  ARGV[4]  rows     rows the batch holds on this partition (kept for the replay's report)

  Returns 1.
  Errors: SINK_STALE (the batch is not the one begun last: another driver of the app moved
    on), STATE_LOST, WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "sink"

local meta, key = KEYS[1], KEYS[2]
local query, batch, rows = ARGV[2], int_arg(ARGV[3]), int_arg(ARGV[4])
if batch == nil or rows == nil or rows < 0 then
  return fail(E.BAD_ARGUMENT, 'batch/rows', ARGV[3] .. '/' .. ARGV[4])
end
local inc, bad = read_checked('HGET', meta, 'inc')
if bad then return bad end
bad = check_incarnation(inc, ARGV[1])
if bad then return bad end
local s
s, bad = load_sink(key)
if bad then return bad end
if s.q ~= query or (s.b ~= batch and s.c ~= batch) then
  return fail(E.SINK_STALE, s.q or '-', s.b, batch)
end
if s.c ~= batch then
  local n = s.n
  redis.call('DEL', key)
  redis.call('HSET', key, 'q', query, 'b', batch, 'n', n, 'c', batch, 'r', rows)
  if s.p then
    redis.call('HSET', key, 'p', s.p)
  end
end
return 1
