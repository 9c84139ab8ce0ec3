--[[
  check: is the caller's grant on one (group, resource) still valid now? Read-only.

  KEYS[1]  the ownership row (hash)
  ARGV[1]  session     the caller's session id
  ARGV[2]  token       the token of the caller's grant
  ARGV[3]  seen_inc    incarnation of the caller's grant

  Returns {generation, token, expires_ms, now_ms}.
  Errors: FENCED (another session was granted since), LEASE_EXPIRED (lapsed by server time,
    nobody else granted yet: renew to continue), STATE_LOST (G9), WRONG_TYPE.
]]
--- @include "common"
--- @include "ownership"

local key = KEYS[1]
local session, token = ARGV[1], int_arg(ARGV[2])
if token == nil then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[2])
end
local seen_inc = ARGV[3]

local row, bad = load_row(key)
if bad then return bad end
local now
now, bad = check_live_grant(row, session, token, seen_inc)
if bad then return bad end
return {row.gen, row.token, row.expires, now}
