--[[
  sink_enlist: a Spark worker's shared producer, about to write an app's rows, records itself
  in the app's sink state on one partition, so that `fencing status` tells its entry apart
  from other shared producers once the tasks are done, and the finishing of a later batch
  removes it once its lease lapsed (sink_commit). Idempotent.

  KEYS[1]  the partition metadata (hash)        <ns>:{<topic>/<p>}:part
  KEYS[2]  the sink state of the app (hash)     <ns>:{<topic>/<p>}:sink:<app>
  KEYS[3]  live shared producers (zset)         <ns>:{<topic>/<p>}:prod:shared
  ARGV[1]  inc      the partition incarnation the caller saw
  ARGV[2]  session  the shared producer's session
  ARGV[3]  pid      its producer id, as written with each of its records ('' if none)

  Returns 1 when recorded (field w:<session> = pid), 0 when there is nothing to record it in:
    no batch of the app was begun here, or the producer is not registered here (a later
    script refuses its writes anyway).
  Errors: STATE_LOST, WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"

local meta, key, shared = KEYS[1], KEYS[2], KEYS[3]
local session = ARGV[2]
if session == '' then
  return fail(E.BAD_ARGUMENT, 'session', session)
end
local inc, bad = read_checked('HGET', meta, 'inc')
if bad then return bad end
bad = check_incarnation(inc, ARGV[1])
if bad then return bad end
local begun
begun, bad = read_checked('HEXISTS', key, 'q')
if bad then return bad end
local registered
registered, bad = read_checked('ZSCORE', shared, session)
if bad then return bad end
if begun == 0 or not registered then
  return 0
end
redis.call('HSET', key, 'w:' .. session, ARGV[3])
return 1
