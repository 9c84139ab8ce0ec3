--[[
  candidate: enter, stay in, or leave the candidates of an election. Only for people and
  tools (`fencing status` shows how many wait); winning is decided by the ownership row alone.

  KEYS[1]  the candidates (sorted set: member -> lease expiry in server ms)
  ARGV[1]  member   '<session> <label>'
  ARGV[2]  ttl_ms   lease of the entry; 0 leaves

  Lapsed entries (a candidate that died) are removed on every call.
  Returns the number of live candidates after the call.
  Errors: WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"

local key, member = KEYS[1], ARGV[1]
local ttl_ms = int_arg(ARGV[2])
if ttl_ms == nil or ttl_ms < 0 then
  return fail(E.BAD_ARGUMENT, 'ttl_ms', ARGV[2])
end
local t = key_type(key)
if t ~= 'none' and t ~= 'zset' then
  return fail(E.WRONG_TYPE, t, key)
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if ttl_ms == 0 then
  redis.call('ZREM', key, member)
else
  redis.call('ZADD', key, now + ttl_ms, member)
end
return redis.call('ZCARD', key)
