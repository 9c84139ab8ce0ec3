--[[
  topic_ready: mark a topic whose partitions are all initialised. From then on a missing
  partition means lost state, never a reason to create it again.

  KEYS[1]  the topic metadata (hash)
  ARGV[1]  inc   the topic incarnation the caller initialised

  Returns 1.
  Errors: STATE_LOST (the topic vanished, was recreated or is being deleted meanwhile),
    WRONG_TYPE.
]]
--- @include "common"

local key = KEYS[1]
local t = key_type(key)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, key)
end
-- G9: the topic the caller initialised (a hash without inc reports it as 'false').
local inc = t == 'hash' and tostring(redis.call('HGET', key, 'inc'))
local lost = check_incarnation(inc, ARGV[1])
if lost then return lost end
if redis.call('HEXISTS', key, 'deleting') == 1 then
  return fail(E.STATE_LOST, 'deleted', ARGV[1], inc)
end
redis.call('HSET', key, 'ready', 1)
return 1
