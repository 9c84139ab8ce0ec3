--[[
  topic_guard: make an election the one guard of a topic (first come), or tell which
  election guards it. One election per topic: the partitions of a topic guarded by two
  could never agree on an epoch.

  KEYS[1]  the topic metadata (hash)           <ns>:{<topic>}:topic
  ARGV[1]  election    the election's name
  ARGV[2]  topic_inc   the topic incarnation the election saw

  Returns {'ours'} (this election guards it now), {'foreign', election} (another one does)
    or {'gone'} (the topic is missing, being deleted or of another incarnation).
  Errors: WRONG_TYPE.
]]
--- @include "common"

local key, election, topic_inc = KEYS[1], ARGV[1], ARGV[2]
local bad = check_types({key}, {'hash'})
if bad then return bad end
local v = redis.call('HMGET', key, 'inc', 'deleting', 'guard')
if v[1] ~= topic_inc or v[2] then
  return {'gone'}
end
if not v[3] or v[3] == '' then
  redis.call('HSET', key, 'guard', election)
  return {'ours'}
end
if v[3] == election then
  return {'ours'}
end
return {'foreign', v[3]}
