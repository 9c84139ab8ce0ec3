--[[
  sink_commit: the Spark sink's driver marks a micro-batch finished on one partition, once
  every Spark task of it succeeded. A replay of it then writes nothing, and the
  batch's per-partition dedupe state is dropped; the app's source positions and row totals
  are brought forward. The app's task producers whose lease lapsed are removed, from the
  shared producers and from the sink state (a bounded number: drop_lapsed_writers).

  KEYS[1]  the partition metadata (hash)        <ns>:{<topic>/<p>}:part
  KEYS[2]  the sink state of the app (hash)     <ns>:{<topic>/<p>}:sink:<app>
  KEYS[3]  live shared producers (zset)         <ns>:{<topic>/<p>}:prod:shared
  ARGV[1]  inc      the partition incarnation the caller saw
  ARGV[2]  query    the streaming query id
  ARGV[3]  batch    the micro-batch id
  ARGV[4]  rows     rows the batch holds on this partition (kept for the replay's report)
  ARGV[5]  written  rows the batch wrote here (added to tw once)
  ARGV[6]  skipped  rows the batch skipped here as written before (added to tk once)
  ARGV[7..] pairs: a source ("<namespace>/<topic>/<incarnation>/<partition>") and the
           highest offset of it whose rows the batch wrote; o:<source> keeps the highest

  Returns 1.
  Errors: SINK_STALE (the batch is not the one begun last: another driver of the app moved
    on), STATE_LOST, WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "sink"

local meta, key, shared = KEYS[1], KEYS[2], KEYS[3]
local query, batch, rows = ARGV[2], int_arg(ARGV[3]), int_arg(ARGV[4])
local written, skipped = int_arg(ARGV[5]), int_arg(ARGV[6])
if batch == nil or rows == nil or rows < 0 or written == nil or written < 0 or skipped == nil
    or skipped < 0 or #ARGV % 2 ~= 0 then
  return fail(E.BAD_ARGUMENT, 'batch/rows', ARGV[3] .. '/' .. ARGV[4])
end
for i = 8, #ARGV, 2 do
  local o = int_arg(ARGV[i])
  if o == nil or o < 0 or ARGV[i - 1] == '' then
    return fail(E.BAD_ARGUMENT, 'position', ARGV[i - 1] .. '/' .. ARGV[i])
  end
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
bad = check_types({shared}, {'zset'})
if bad then return bad end
if s.c ~= batch then
  local n = s.n
  clear_sink(key)
  redis.call('HSET', key, 'q', query, 'b', batch, 'n', n, 'c', batch, 'r', rows)
  if s.p then
    redis.call('HSET', key, 'p', s.p)
  end
  redis.call('HINCRBY', key, 'tw', written)
  redis.call('HINCRBY', key, 'tk', skipped)
  for i = 7, #ARGV, 2 do
    local field = 'o:' .. ARGV[i]
    local stored = tonumber(redis.call('HGET', key, field) or '-1')
    if int_arg(ARGV[i + 1]) > stored then
      redis.call('HSET', key, field, ARGV[i + 1])
    end
  end
end
drop_lapsed_writers(key, shared, now_ms())
return 1
