--[[
  topic_open: read a topic's metadata, creating it on first use.

  KEYS[1]  the topic metadata (hash)           <ns>:{<topic>}:topic
  ARGV[1]  partitions   '' to open an existing topic only, else the count (>= 1)
  ARGV[2]  new_inc      incarnation to store if the topic is created now
  ARGV[3]  seen_inc     incarnation the handle saw before ('' if none)
  ARGV[4]  pidexp       producer state expiry (ms, >= 1000) to store if the topic is created
                        now: fixed for the topic's life, whatever later clients are set to
  ARGV[5]  dedupw       the duplicate window of idempotent producers (batches, >= 1) to
                        store if the topic is created now: fixed likewise
  ARGV[6]  midw         the message id window's count (ids per partition, >= 1): likewise
  ARGV[7]  midttl       the message id window's age (ms, >= 1000): likewise

  Returns {incarnation, partitions, ready, created, pidexp, dedupw, midw, midttl} where ready
  is 1 once every partition was initialised, created is 1 if this call created the topic,
  pidexp is the topic's producer state expiry (ms; 7 days for a topic created before it was
  kept), dedupw its duplicate window (5 for a topic created before it was kept), midw and
  midttl its message id window (10,000 ids and one hour for a topic created before).
  Errors: UNKNOWN_TOPIC (missing and ARGV[1] is ''), PARTITIONS_MISMATCH (exists with
    another count), STATE_LOST (the topic the handle saw vanished, was recreated or is being
    deleted), TOPIC_DELETING (a new handle: the topic is being deleted), WRONG_TYPE.
]]
--- @include "common"

local key = KEYS[1]
local want, new_inc, seen_inc, pidexp = ARGV[1], ARGV[2], ARGV[3], int_arg(ARGV[4])
local dedupw, midw, midttl = int_arg(ARGV[5]), int_arg(ARGV[6]), int_arg(ARGV[7])
if pidexp == nil or pidexp < 1000 then
  return fail(E.BAD_ARGUMENT, 'pidexp', ARGV[4])
end
if dedupw == nil or dedupw < 1 then
  return fail(E.BAD_ARGUMENT, 'dedupw', ARGV[5])
end
if midw == nil or midw < 1 or midttl == nil or midttl < 1000 then
  return fail(E.BAD_ARGUMENT, 'midw/midttl', ARGV[6] .. '/' .. ARGV[7])
end

local t = key_type(key)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, key)
end
local v = t == 'hash'
  and redis.call('HMGET', key, 'inc', 'partitions', 'ready', 'pidexp', 'dedupw', 'deleting',
    'midw', 'midttl')
if v and v[6] then
  -- Being deleted (topic_delete): it is going away, and its name is free only afterwards.
  if seen_inc ~= '' then
    return fail(E.STATE_LOST, 'deleted', seen_inc, v[1] or '-')
  end
  return fail(E.TOPIC_DELETING, key)
end
if seen_inc ~= '' then
  -- G9: the topic the handle saw (a hash without inc reports it as '').
  local lost = check_incarnation(v and (v[1] or ''), seen_inc)
  if lost then return lost end
end
if not v then
  if want == '' then
    return fail(E.UNKNOWN_TOPIC, key)
  end
  local n = tonumber(want)
  if n == nil or n < 1 then
    return fail(E.BAD_ARGUMENT, 'partitions', want)
  end
  redis.call('HSET', key, 'inc', new_inc, 'partitions', n, 'ready', 0, 'created_ms', now_ms(),
    'pidexp', pidexp, 'dedupw', dedupw, 'midw', midw, 'midttl', midttl)
  return {new_inc, n, 0, 1, pidexp, dedupw, midw, midttl}
end

local inc, n, ready = v[1] or '', tonumber(v[2] or '0'), tonumber(v[3] or '0')
local stored_pidexp = tonumber(v[4] or DEFAULT_PID_EXPIRY_MS)
if want ~= '' and tonumber(want) ~= n then
  return fail(E.PARTITIONS_MISMATCH, n, want)
end
return {inc, n, ready, 0, stored_pidexp, tonumber(v[5] or DEFAULT_DEDUP_WINDOW),
  tonumber(v[7] or DEFAULT_MESSAGE_ID_WINDOW), tonumber(v[8] or DEFAULT_MESSAGE_ID_TTL_MS)}
