--[[
  topic_ready: mark a topic whose partitions are all initialised. From then on a missing
  partition means lost state, never a reason to create it again.

  KEYS[1]  the topic metadata (hash)
  ARGV[1]  inc   the topic incarnation the caller initialised

  Returns 1.
  Errors: STATE_LOST (the topic vanished or was recreated meanwhile), WRONG_TYPE.
]]
--- @include "common"

local key = KEYS[1]
local t = key_type(key)
if t == 'none' then
  return fail(E.STATE_LOST, 'missing', ARGV[1], '-')
end
if t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, key)
end
local inc = redis.call('HGET', key, 'inc')
if inc ~= ARGV[1] then
  return fail(E.STATE_LOST, 'incarnation', ARGV[1], tostring(inc))
end
redis.call('HSET', key, 'ready', 1)
return 1
