--[[
  producer_close: leave a partition at once; waiters are woken. Idempotent, never fails a
  close because the producer was fenced meanwhile.

  KEYS[1]  the exclusive-producer row (hash)
  KEYS[2]  live shared producers (zset)
  KEYS[3]  the waiter queue (zset)
  KEYS[4]  the waiters' leases (hash)
  ARGV[1]  session      the producer's session id
  ARGV[2]  mode         'x' (exclusive holder), 's' (shared) or 'w' (waiter)
  ARGV[3]  epoch        the epoch the producer holds (ignored for 'w'); -1 for 'x': whatever
                        epoch this session holds (an open whose reply never came: the
                        session is unique to one producer object, so it is enough)
  ARGV[4]  released_ch  channel waiters listen on, in this partition's slot
                        (<row key>:released)

  Returns 1 if the producer was still registered, else 0.
  Errors: WRONG_TYPE.
  Notifies (last; sharded pub/sub where the server has it): "released <mode>" on
    released_ch when the producer was still registered.
]]
--- @include "common"
--- @include "producer"

local row_key, shared, waiters, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local session, mode, epoch, released_ch = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local bad = check_types({row_key, shared, waiters, leases}, {'hash', 'zset', 'zset', 'hash'})
if bad then return bad end

local done = 0
if mode == 'x' then
  local v = redis.call('HMGET', row_key, 'session', 'token', 'mode')
  if v[1] == session and (epoch < 0 or tonumber(v[2]) == epoch) and v[3] == 'x' then
    redis.call('HSET', row_key, 'session', '', 'expires', 0)
    done = 1
  end
elseif mode == 's' then
  done = redis.call('ZREM', shared, session)
else
  done = redis.call('ZREM', waiters, session)
  redis.call('HDEL', leases, session)
end
if done == 1 then
  notify(released_ch, 'released ' .. mode)
end
return done
