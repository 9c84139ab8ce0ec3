--[[
  The queues of a partition's producers (the access modes): live shared producers (a zset
  session -> lease expiry, ms) and WAIT_FOR_EXCLUSIVE waiters (a zset session -> arrival
  number, FIFO, and a hash session -> lease expiry). Lapsed entries are removed a bounded
  number at a time.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.
]]
--- @include "common"

local MAX_CLEANUP = 100

-- Drops lapsed shared producers (bounded); returns the earliest live expiry or nil.
local function live_shared(shared, now)
  local gone = redis.call('ZRANGEBYSCORE', shared, '-inf', now, 'LIMIT', 0, MAX_CLEANUP)
  if #gone > 0 then
    redis.call('ZREM', shared, unpack(gone))
  end
  local first = redis.call('ZRANGEBYSCORE', shared, '(' .. now, '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  if #first == 0 then
    return nil
  end
  return tonumber(first[2])
end

-- The first live waiter and its lease expiry, dropping lapsed ones ahead of it (bounded).
local function head_waiter(waiters, leases, now)
  local removed = 0
  while removed < MAX_CLEANUP do
    local first = redis.call('ZRANGE', waiters, 0, 0)
    if #first == 0 then
      return nil, nil
    end
    local expires = tonumber(redis.call('HGET', leases, first[1]) or '0')
    if expires > now then
      return first[1], expires
    end
    redis.call('ZREM', waiters, first[1])
    redis.call('HDEL', leases, first[1])
    removed = removed + 1
  end
  return nil, nil
end
