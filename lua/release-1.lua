--[[
  release: give up the caller's grant on one (group, resource) at once. The row keeps its
  generation and token (T never decreases); waiters are told on the released channel.

  KEYS[1]  the ownership row (hash)
  ARGV[1]  session      the caller's session id
  ARGV[2]  token        the token of the caller's grant; '' releases whatever this session
                        holds (after a claim whose reply was lost: the session is unique)
  ARGV[3]  released_ch  channel to tell waiters that the resource is free, in this row's slot
                        (<row key>:released)

  Returns 1 if released, 0 if the caller did not hold it (already severed, released, or the
  row is gone): release is idempotent and never fails a close.
  Errors: WRONG_TYPE.
  Notifies (last; sharded pub/sub where the server has it): "released <token>" on
    released_ch when it released.
]]
--- @include "common"
--- @include "ownership"

local key = KEYS[1]
local session, token = ARGV[1], int_arg(ARGV[2])
local any_token = ARGV[2] == ''
if token == nil and not any_token then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[2])
end
local released_ch = ARGV[3]

local row, bad = load_row(key)
if bad then return bad end
if row == nil or row.session ~= session or (not any_token and row.token ~= token) then
  return 0
end
redis.call('HSET', key, 'session', '', 'expires', 0)
notify(released_ch, 'released ' .. row.token)
return 1
