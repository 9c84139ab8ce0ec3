--[[
  renew: extend the caller's lease on one (group, resource). Works after the lease lapsed as
  long as nobody else was granted meanwhile (same generation, same token).

  KEYS[1]  the ownership row (hash)
  ARGV[1]  session     the caller's session id
  ARGV[2]  token       the token of the caller's grant
  ARGV[3]  ttl_ms      new lease length in milliseconds (> 0)
  ARGV[4]  seen_inc    incarnation of the caller's grant

  Returns {generation, token, expires_ms, now_ms}.
  Errors: FENCED (another session was granted since), STATE_LOST (G9), WRONG_TYPE.
]]
--- @include "common"
--- @include "ownership"

local key = KEYS[1]
local session, token = ARGV[1], int_arg(ARGV[2])
if token == nil then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[2])
end
local ttl_ms = int_arg(ARGV[3])
local seen_inc = ARGV[4]

if ttl_ms == nil or ttl_ms <= 0 then
  return fail(E.BAD_ARGUMENT, 'ttl_ms', ARGV[3])
end

local row, bad = load_row(key)
if bad then return bad end
bad = check_history(row, seen_inc, token)
if bad then return bad end
bad = check_holder(row, session, token)
if bad then return bad end

local now = now_ms()
local expires = now + ttl_ms
redis.call('HSET', key, 'expires', expires)
return {row.gen, row.token, expires, now}
