--[[
  partition_delete: the steps of deleting one partition of a topic (see topic_delete),
  each only on the topic incarnation being deleted: a partition of another incarnation (a
  topic made again after an earlier delete finished) is never touched.

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the log (stream)                     <ns>:{<topic>/<p>}:log
  KEYS[3]  the exclusive-producer row (hash)    <ns>:{<topic>/<p>}:own:__producer__
  KEYS[4]  the shared producers (zset)          <ns>:{<topic>/<p>}:prod:shared
  KEYS[5]  the waiters (zset)                   <ns>:{<topic>/<p>}:prod:waiters
  KEYS[6]  the waiters' leases (hash)           <ns>:{<topic>/<p>}:prod:waitexp
  KEYS[7]  the producer states (hash)           <ns>:{<topic>/<p>}:pids
  KEYS[8]  the producer state expiries (zset)   <ns>:{<topic>/<p>}:pidexp
  KEYS[9]  the producer names (hash)            <ns>:{<topic>/<p>}:names
  KEYS[10] the duplicate windows (hash)         <ns>:{<topic>/<p>}:win
  KEYS[11] the committed offsets (hash)         <ns>:{<topic>/<p>}:committed
  KEYS[12] the message ids (hash)               <ns>:{<topic>/<p>}:mids
  KEYS[13] the message ids' order (list)        <ns>:{<topic>/<p>}:midq
  KEYS[14] the delete marks (hash)              <ns>:{<topic>/<p>}:deleted
           field: a deleted partition incarnation, value: when it was deleted (ms)
  ARGV[1]  topic_inc  the incarnation of the topic being deleted
  ARGV[2]  step   'mark': take no new user (producer_open, pid_open, partition_open and
                  sink_begin refuse); 'unmark': the delete was refused; 'drop': remove the
                  keys, the metadata with them (a partition already without metadata had
                  it removed by this delete, or by one of the same incarnation cut short)
  ARGV[3]  keep_ms  for 'drop': how long the delete mark is kept (empty: the partition's
                  producer state expiry), so that a live handle of the deleted incarnation
                  is told of the delete, not of lost writes; the mark hash expires as a
                  whole, keep_ms after the latest delete of the partition

  Returns 1 if the partition is (or was) of that incarnation, 0 if not (nothing touched).
  Errors: WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"

local meta, topic_inc, step = KEYS[1], ARGV[1], ARGV[2]
local t = key_type(meta)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, meta)
end
local stored = t == 'hash' and redis.call('HGET', meta, 'topic_inc')
if t == 'hash' and stored ~= topic_inc then
  return 0
end
if step == 'mark' then
  if t == 'hash' then
    redis.call('HSET', meta, 'deleting', 1)
  end
  return 1
elseif step == 'unmark' then
  if t == 'hash' then
    redis.call('HDEL', meta, 'deleting')
  end
  return 1
elseif step == 'drop' then
  if t == 'hash' then
    local v = redis.call('HMGET', meta, 'inc', 'pidexp')
    local mark_type = key_type(KEYS[14])
    if mark_type ~= 'none' and mark_type ~= 'hash' then
      return fail(E.WRONG_TYPE, mark_type, KEYS[14])
    end
    if v[1] then
      local keep = tonumber(ARGV[3] ~= '' and ARGV[3] or v[2] or DEFAULT_PID_EXPIRY_MS)
      redis.call('HSET', KEYS[14], v[1], now_ms())
      redis.call('PEXPIRE', KEYS[14], math.max(1, math.floor(keep)))
    end
  end
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
    KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13])
  return 1
end
return fail(E.BAD_ARGUMENT, 'step', step)
