--[[
  Idempotent producers (seed 003, DESIGN G5). Needs common.lua.

  Per partition: a hash PID -> JSON state {g = generation, s = last sequence written,
  w = window of the last 5 batches {first_seq, last_seq, checksum, first_offset}}, and a zset
  PID -> last write (server ms) so state expires after inactivity, removed a few per call.
  Memory is O(live producers x 5 batches), never O(records).
]]

local WINDOW = 5
local MAX_EXPIRE = 10

local function drop_expired(pids, expiry, now, expiry_ms)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now - expiry_ms, 'LIMIT', 0,
    MAX_EXPIRE)
  if #gone > 0 then
    redis.call('HDEL', pids, unpack(gone))
    redis.call('ZREM', expiry, unpack(gone))
  end
end

local function load_pid(pids, pid)
  local raw = redis.call('HGET', pids, pid)
  if not raw then
    return nil
  end
  return cjson.decode(raw)
end

local function save_pid(pids, expiry, pid, state, now)
  redis.call('HSET', pids, pid, cjson.encode(state))
  redis.call('ZADD', expiry, now, pid)
end

-- The window entry of exactly this batch, or nil.
local function find_batch(state, first, last)
  for _, b in ipairs(state.w) do
    if b[1] == first and b[2] == last then
      return b
    end
  end
  return nil
end

local function remember_batch(state, first, last, checksum, offset)
  state.s = last
  local w = state.w
  w[#w + 1] = {first, last, checksum, offset}
  while #w > WINDOW do
    table.remove(w, 1)
  end
end
