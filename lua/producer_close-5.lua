--[[
  producer_close: leave a partition at once; waiters are woken. Idempotent, never fails a
  close because the producer was fenced meanwhile, nor because the store lost writes: it
  leaves all the same, then reports the loss (G9), so a handle whose last sends were lost
  and whose next call is close() still learns it.

  KEYS[1]  the exclusive-producer row (hash)
  KEYS[2]  live shared producers (zset)
  KEYS[3]  the waiter queue (zset)
  KEYS[4]  the waiters' leases (hash)
  KEYS[5]  the partition metadata (hash)
  ARGV[1]  session      the producer's session id
  ARGV[2]  mode         'x' (exclusive holder), 's' (shared) or 'w' (waiter)
  ARGV[3]  epoch        the epoch the producer holds (ignored for 'w'); -1 for 'x': whatever
                        epoch this session holds (an open whose reply never came: the
                        session is unique to one producer object, so it is enough)
  ARGV[4]  released_ch  channel waiters listen on, in this partition's slot
                        (<row key>:released)
  ARGV[5]  part_inc     the partition incarnation the producer saw ('' checks nothing: a
                        handle that never opened the partition)
  ARGV[6]  seen_next    the highest next offset the producer saw on the partition

  Returns {registered, lost}: registered 1 if the producer was still registered, else 0;
    lost '' when the partition is as the producer saw it, else the STATE_LOST error text
    ("STATE_LOST <reason> <seen> <found>") that a send would have raised.
  Errors: WRONG_TYPE, BAD_ARGUMENT (a loss of state is in the reply, never an error).
  Notifies (last; sharded pub/sub where the server has it): "released <mode>" on
    released_ch when the producer was still registered.
]]
--- @include "common"
--- @include "producer"

local row_key, shared, waiters, leases, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local session, mode, epoch, released_ch = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local part_inc, seen_next = ARGV[5], int_arg(ARGV[6])
if seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[6])
end
local bad = check_types({row_key, shared, waiters, leases, meta},
  {'hash', 'zset', 'zset', 'hash', 'hash'})
if bad then return bad end

-- G9 as a send judges it (check_partition's reasons, in its order), as the text of the
-- STATE_LOST error a send would raise, or '' when the partition is as the producer saw it.
-- Judged before leaving, reported after: the loss never keeps a lease alive.
local function loss(seen_inc, seen)
  local v = redis.call('HMGET', meta, 'inc', 'next')
  if not v[1] then
    return E.STATE_LOST .. ' missing ' .. seen_inc .. ' -'
  end
  if v[1] ~= seen_inc then
    return E.STATE_LOST .. ' incarnation ' .. seen_inc .. ' ' .. v[1]
  end
  local next_offset = (v[2] or 0) + 0
  if next_offset < seen then
    return string.format('%s offset %d %d', E.STATE_LOST, seen, next_offset)
  end
  return ''
end
local lost = part_inc ~= '' and loss(part_inc, seen_next) or ''

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
return {done, lost}
