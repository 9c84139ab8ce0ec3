--[[
  commit: store a single reader's committed offset of one partition, fenced by its grant.
  The check of the grant and the write happen here together, so a superseded member's
  commit writes nothing, even if it was on the wire at the moment of takeover.

  KEYS[1]  the ownership row (<group>, "<topic>/<partition>") (hash)
  KEYS[2]  the partition metadata (hash)
  KEYS[3]  the partition's committed offsets (hash: group -> offset, group#t -> token)
  ARGV[1]  session     the member's session id
  ARGV[2]  token       the token of the member's grant
  ARGV[3]  own_inc     incarnation of the member's grant
  ARGV[4]  part_inc    incarnation of the partition the member opened
  ARGV[5]  group       the consumer group
  ARGV[6]  offset      the next offset to read (0 <= offset <= the partition's next offset)
  ARGV[7]  seen_next   the highest next offset the member saw on the partition (G9)
  ARGV[8]  last        the offset this member last committed under this grant ('' if none, or
                       if that commit's outcome is unknown): the stored one must still be it
                       (or this very offset: a resend after a lost reply)

  Returns {offset, now_ms}.
  Errors: FENCED (another session was granted since, or the grant was released),
    LEASE_EXPIRED (lapsed by server time, nobody else granted yet: renew to continue),
    STATE_LOST (G9: the row or the partition is gone, was recreated, or went back below
      an offset the member saw; or the committed offset is no longer the one this member
      last committed: a failover lost that commit),
    OFFSET_OUT_OF_RANGE (past the partition's next offset), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "ownership"

local session, token = ARGV[1], int_arg(ARGV[2])
local own_inc, part_inc, group = ARGV[3], ARGV[4], ARGV[5]
local offset = int_arg(ARGV[6])
local seen_next = int_arg(ARGV[7])
if seen_next == nil or seen_next < 0 then
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[7])
end
if token == nil then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[2])
end
if offset == nil or offset < 0 then
  return fail(E.BAD_ARGUMENT, 'offset', ARGV[6])
end

local row, bad = load_row(KEYS[1])
if bad then return bad end
local now
now, bad = check_live_grant(row, session, token, own_inc)
if bad then return bad end

local v
v, bad = read_checked('HMGET', KEYS[2], 'inc', 'next', 'start')
if bad then return bad end
bad = check_incarnation(v[1], part_inc)
if bad then return bad end
local next_offset = tonumber(v[2] or '0')
if next_offset < seen_next then
  return fail(E.STATE_LOST, 'offset', seen_next, next_offset)
end
if offset > next_offset then
  return fail(E.OFFSET_OUT_OF_RANGE, offset, tonumber(v[3] or '0'), next_offset)
end
local ct = key_type(KEYS[3])
if ct ~= 'none' and ct ~= 'hash' then
  return fail(E.WRONG_TYPE, ct, KEYS[3])
end
local last = ARGV[8]
if last ~= nil and last ~= '' then
  -- G9: the commit this member made last is still there (with its token), or it was lost.
  -- (A resend of this very commit after a lost reply finds its own offset there.)
  local c = redis.call('HMGET', KEYS[3], group, group .. '#t')
  local stored = tonumber(c[1] or '')
  if (stored ~= tonumber(last) and stored ~= offset) or tonumber(c[2] or '') ~= token then
    return fail(E.STATE_LOST, 'committed', last, c[1] or '-')
  end
end
redis.call('HSET', KEYS[3], group, offset, group .. '#t', token)
return {offset, now}
