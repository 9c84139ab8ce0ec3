--[[
  sink_begin: the Spark sink's driver begins (or replays) a micro-batch on one partition,
  before any executor writes.

  KEYS[1]  the partition metadata (hash)        <ns>:{<topic>/<p>}:part
  KEYS[2]  the sink state of the app (hash)     <ns>:{<topic>/<p>}:sink:<app>
  ARGV[1]  inc          the partition incarnation the caller saw
  ARGV[2]  query        the streaming query id
  ARGV[3]  batch        the micro-batch id
  ARGV[4]  npart        the batch's Spark partition count (0: not known to the caller)
  ARGV[5]  new_lineage  '1': a query id other than the stored one starts a new lineage

  Returns {status, stored_query, stored_batch, rows, previous}: status 'fresh' (a new batch: the
    previous batch's state is dropped), 'replay' (this batch was begun before and did not
    finish: executors deduplicate), 'done' (this batch finished before: nothing to write;
    rows is what it wrote here), 'lineage' (a new lineage replaced stored_query);
    previous is the query id the caller's lineage took over from here ('' if none).
  Errors: SINK_LINEAGE (another query id owns the app id here: a reset checkpoint, or a
    takeover, when the query it took over from is the caller's),
    SINK_PARTITIONING (a replay with another Spark partition count), SINK_STALE (a batch
    below the last one begun, not known finished), TOPIC_DELETING, STATE_LOST, WRONG_TYPE,
    BAD_ARGUMENT.
]]
--- @include "common"
--- @include "sink"

local meta, key = KEYS[1], KEYS[2]
local query, new_lineage = ARGV[2], ARGV[5]
local batch, npart = int_arg(ARGV[3]), int_arg(ARGV[4])
if batch == nil or batch < 0 or npart == nil or npart < 0 or query == '' then
  return fail(E.BAD_ARGUMENT, 'query/batch/npart', query .. '/' .. ARGV[3] .. '/' .. ARGV[4])
end
local inc, bad = read_checked('HGET', meta, 'inc')
if bad then return bad end
bad = check_incarnation(inc, ARGV[1])
if bad then return bad end
if redis.call('HEXISTS', meta, 'deleting') == 1 then
  return fail(E.TOPIC_DELETING, meta)  -- no batch begins on a topic being deleted
end
local s
s, bad = load_sink(key)
if bad then return bad end

local status = 'fresh'
local previous = s.p or ''
if s.q and s.q ~= query then
  if new_lineage ~= '1' then
    return fail(E.SINK_LINEAGE, s.q, s.b, s.c, s.p or '')
  end
  status = 'lineage'
  previous = s.q
elseif s.q then
  if batch == s.c then
    return {'done', s.q, s.b, s.r, previous}
  end
  if batch == s.b then
    if npart ~= s.n then
      return fail(E.SINK_PARTITIONING, batch, s.n, npart)
    end
    return {'replay', s.q, s.b, 0, previous}
  end
  if batch < s.b then
    return fail(E.SINK_STALE, s.q, s.b, batch)
  end
end
clear_sink(key)
redis.call('HSET', key, 'q', query, 'b', batch, 'n', npart)
if previous ~= '' then
  redis.call('HSET', key, 'p', previous)
end
return {status, s.q or '', s.b, 0, previous}
