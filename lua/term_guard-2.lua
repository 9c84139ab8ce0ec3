--[[
  term_guard: add a topic to the topics an election guards, atomically with the check that
  the caller's term still holds (so a later term, granted after this, finds the topic and
  fences it); or drop a topic that was deleted or is guarded by another election.

  KEYS[1]  the election's ownership row (hash) <ns>:{<name>}:own:__election__
  KEYS[2]  the guarded topics (hash)           <row key>:guards   topic -> "<inc> <partitions>"
  ARGV[1]  op          'add' | 'drop'
  ARGV[2]  topic       the topic's name
  ARGV[3]  value       "<topic incarnation> <partitions>"; for 'drop', the entry to drop
                       (another value, a newer registration, is kept)
  ARGV[4]  session     for 'add': the term's session
  ARGV[5]  token       for 'add': the term's token
  ARGV[6]  seen_inc    for 'add': the row incarnation the term saw

  Returns 1 ('add': the topic is guarded; 'drop': the entry was dropped), else 0.
  Errors ('add'): FENCED (a later term was granted, or the term was resigned),
    LEASE_EXPIRED (the term's lease lapsed), STATE_LOST (G9), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "ownership"

local row_key, guards = KEYS[1], KEYS[2]
local op, topic, value = ARGV[1], ARGV[2], ARGV[3]
local bad = check_types({guards}, {'hash'})
if bad then return bad end
if op == 'drop' then
  if redis.call('HGET', guards, topic) == value then
    redis.call('HDEL', guards, topic)
    return 1
  end
  return 0
end
if op ~= 'add' then
  return fail(E.BAD_ARGUMENT, 'op', op)
end
local token = int_arg(ARGV[5])
if token == nil then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[5])
end
local row
row, bad = load_row(row_key)
if bad then return bad end
local _
_, bad = check_live_grant(row, ARGV[4], token, ARGV[6])
if bad then return bad end
redis.call('HSET', guards, topic, value)
return 1
