--[[
  partition_open: read a partition's metadata, creating it while its topic is initialised.

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  ARGV[1]  topic_inc   the topic's incarnation
  ARGV[2]  new_inc     incarnation to store if the partition is created now
  ARGV[3]  create      1 while the topic is not marked ready (may create), else 0
  ARGV[4]  seen_inc    incarnation the handle saw before ('' if none)
  ARGV[5]  maxlen      '' to leave retention as it is, else the max records kept (0: no limit)
  ARGV[6]  pidexp      the topic's producer state expiry (ms), stored if the partition is
                       created now (scripts on the partition read it from here)
  ARGV[7]  dedupw      the topic's duplicate window (batches), stored likewise
  ARGV[8]  midw        the topic's message id window: count (ids), stored likewise
  ARGV[9]  midttl      and age (ms), stored likewise

  Returns {incarnation, next, start, maxlen, pidexp, dedupw, midw, midttl}.
  Errors: STATE_LOST (missing after the topic was ready, another incarnation, a partition of
    another topic incarnation, or records left without their metadata),
    TOPIC_DELETING (its topic is being deleted), WRONG_TYPE.
]]
--- @include "common"

local key = KEYS[1]
local topic_inc, new_inc, create, seen_inc, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local pidexp, dedupw = int_arg(ARGV[6]), int_arg(ARGV[7])
local midw, midttl = int_arg(ARGV[8]), int_arg(ARGV[9])
if pidexp == nil or pidexp < 1000 then
  return fail(E.BAD_ARGUMENT, 'pidexp', ARGV[6])
end
if dedupw == nil or dedupw < 1 then
  return fail(E.BAD_ARGUMENT, 'dedupw', ARGV[7])
end
if midw == nil or midw < 1 or midttl == nil or midttl < 1000 then
  return fail(E.BAD_ARGUMENT, 'midw/midttl', ARGV[8] .. '/' .. ARGV[9])
end

local t = key_type(key)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, key)
end
local st = key_type(KEYS[2])
if st ~= 'none' and st ~= 'stream' then
  return fail(E.WRONG_TYPE, st, KEYS[2])
end
if t == 'hash' and create == '1' and seen_inc == ''
    and redis.call('HGET', key, 'topic_inc') ~= topic_inc
    and redis.call('EXISTS', KEYS[2]) == 0 then
  -- A topic being created finds metadata of another topic incarnation and no record: left
  -- by a creator of a deleted topic that went on after the delete (the topic's metadata
  -- names this incarnation now, so nothing else uses it). Made afresh.
  redis.call('DEL', key)
  t = 'none'
end
if t == 'hash' and redis.call('HEXISTS', key, 'deleting') == 1 then
  return fail(E.TOPIC_DELETING, key)
end
if t == 'none' then
  if seen_inc ~= '' or create ~= '1' then
    -- G9: gone (once its topic is ready, a partition is never created again).
    return check_incarnation(nil, seen_inc)
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    -- Records without metadata: the offsets they were written at are unknown.
    return fail(E.STATE_LOST, 'stream', '-', '-')
  end
  local m = tonumber(maxlen) or 0
  redis.call('HSET', key, 'inc', new_inc, 'topic_inc', topic_inc, 'next', 0, 'start', 0,
    'maxlen', m, 'pidexp', pidexp, 'dedupw', dedupw, 'midw', midw, 'midttl', midttl)
  return {new_inc, 0, 0, m, pidexp, dedupw, midw, midttl}
end

local v = redis.call('HMGET', key, 'inc', 'topic_inc', 'next', 'start', 'maxlen', 'pidexp',
  'dedupw', 'midw', 'midttl')
if v[2] ~= topic_inc then
  return fail(E.STATE_LOST, 'topic', topic_inc, tostring(v[2]))
end
if seen_inc ~= '' then
  -- G9 (a hash without inc reports it as 'false').
  local lost = check_incarnation(tostring(v[1]), seen_inc)
  if lost then return lost end
end
local m = tonumber(v[5] or '0')
if maxlen ~= '' and tonumber(maxlen) ~= m then
  m = tonumber(maxlen)
  redis.call('HSET', key, 'maxlen', m)
end
return {v[1], tonumber(v[3]), tonumber(v[4]), m, tonumber(v[6] or DEFAULT_PID_EXPIRY_MS),
  tonumber(v[7] or DEFAULT_DEDUP_WINDOW), tonumber(v[8] or DEFAULT_MESSAGE_ID_WINDOW),
  tonumber(v[9] or DEFAULT_MESSAGE_ID_TTL_MS)}
