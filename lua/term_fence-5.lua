--[[
  term_fence: fence one partition of a topic an election guards at the token of a term just
  granted, before the new leader is told it leads. Idempotent: a retry (or a fence of an
  older term, late) finds the epoch at or above the token and changes nothing.

  KEYS[1]  the exclusive-producer row (hash)   <ns>:{<t>/<p>}:own:__producer__
  KEYS[2]  live shared producers (zset)        <ns>:{<t>/<p>}:prod:shared
  KEYS[3]  the waiter queue (zset)             <ns>:{<t>/<p>}:prod:waiters
  KEYS[4]  the waiters' leases (hash)          <ns>:{<t>/<p>}:prod:waitexp
  KEYS[5]  the partition metadata (hash)       <ns>:{<t>/<p>}:part
  ARGV[1]  election    the election's name
  ARGV[2]  token       the new term's token (>= 1)
  ARGV[3]  topic_inc   the topic incarnation the election guards
  ARGV[4]  new_inc     incarnation to store if the row is created now
  ARGV[5]  session_ch  prefix of a severed holder's channel, <ns>:{<t>/<p>}:session:
  ARGV[6]  released_ch channel waiters listen on, in this slot (<row key>:released)

  Returns {'fenced', epoch} (the partition's epoch is at least the token, nobody registered
    below it can write), {'gone'} (the partition is missing or of another topic
    incarnation: the topic was deleted) or {'foreign', election} (another election guards
    it).
  Errors: WRONG_TYPE, BAD_ARGUMENT.
  Notifies (last; sharded pub/sub where the server has it): a severed holder on
    session_ch .. <its session>, and waiters on released_ch ("fenced <epoch>").
]]
--- @include "common"
--- @include "producer"
--- @include "guard"

local row_key, shared, waiters, leases, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local election, token, topic_inc = ARGV[1], int_arg(ARGV[2]), ARGV[3]
if token == nil or token < 1 then
  return fail(E.BAD_ARGUMENT, 'token', ARGV[2])
end
local bad = check_types({shared, waiters, leases, meta}, {'zset', 'zset', 'hash', 'hash'})
if bad then return bad end
if redis.call('HGET', meta, 'topic_inc') ~= topic_inc then
  return {'gone'}
end
local row
row, bad = load_producer_row(row_key, ARGV[4])
if bad then return bad end
local guard = row.exists and guard_of(row_key) or ''
if guard ~= '' and guard ~= election then
  return {'foreign', guard}
end
if guard == election and row.token >= token then
  return {'fenced', row.token}
end
fence_partition(row, row_key, shared, waiters, leases, election, token, ARGV[5], ARGV[6])
return {'fenced', row.token}
