--[[
  producer_renew: extend an exclusive holder's or a shared producer's lease (every ttl/3,
  off the hot path). A lapsed lease is renewed as long as the epoch did not move.

  KEYS[1]  the exclusive-producer row (hash)
  KEYS[2]  live shared producers (zset)
  ARGV[1]  session   the producer's session id
  ARGV[2]  mode      'x' (exclusive holder) or 's' (shared producer)
  ARGV[3]  epoch     the epoch the producer holds or registered under
  ARGV[4]  ttl_ms    lease length (> 0)
  ARGV[5]  inc       the row incarnation the producer saw

  Returns the new lease expiry (ms, server time), or 0 for a shared producer that is not
  registered any more (closed, or cleaned up after its lease lapsed).
  Errors: PRODUCER_FENCED (the epoch moved, or another session holds it), STATE_LOST,
    WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "producer"

local row_key, shared = KEYS[1], KEYS[2]
local session, mode, epoch = ARGV[1], ARGV[2], int_arg(ARGV[3])
local ttl_ms, inc = int_arg(ARGV[4]), ARGV[5]
if ttl_ms == nil or ttl_ms <= 0 or epoch == nil then
  return fail(E.BAD_ARGUMENT, 'ttl_ms/epoch', ARGV[4] .. '/' .. ARGV[3])
end
local bad = check_types({shared}, {'zset'})
if bad then return bad end
local _
_, bad = check_standing(row_key, session, mode, epoch, inc)
if bad then return bad end
local expires = now_ms() + ttl_ms
if mode == 'x' then
  redis.call('HSET', row_key, 'expires', expires)
elseif redis.call('ZSCORE', shared, session) == false then
  -- Not registered any more (closed, or its lapsed lease was cleaned up): a renewal never
  -- re-registers, so it cannot race a close(). Sends still work while the epoch holds.
  return 0
else
  redis.call('ZADD', shared, expires, session)
end
return expires
