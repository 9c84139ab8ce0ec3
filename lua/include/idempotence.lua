--[[
  Idempotent producers (seed 003, DESIGN G5). Needs common.lua.

  Per partition: a hash PID -> JSON state {g = generation, s = last sequence written,
  t = last write (server ms), w = window of the last 5 batches {first_seq, last_seq,
  checksum, first_offset}}, and a zset PID -> last write, refreshed at most once a minute,
  so expired states can be found and removed, a few per new registration. A state whose
  last write is older than the expiry counts as gone even before it is removed.
  Memory is O(live producers x 5 batches), never O(records).
]]

local WINDOW = 5
local MAX_EXPIRE = 10
local EXPIRY_INDEX_MS = 60000

-- Removes a few states whose last write is older than the expiry. The index score can be
-- up to EXPIRY_INDEX_MS behind a state's real last write, so each candidate's own last
-- write decides: a live one is re-indexed, never removed.
local function drop_expired(pids, expiry, now, expiry_ms)
  local candidates = redis.call('ZRANGEBYSCORE', expiry, '-inf', now - expiry_ms, 'LIMIT', 0,
    MAX_EXPIRE)
  for _, pid in ipairs(candidates) do
    local raw = redis.call('HGET', pids, pid)
    local t = raw and (cjson.decode(raw).t or 0) or 0
    if raw and t >= now - expiry_ms then
      redis.call('ZADD', expiry, t, pid)
    else
      redis.call('HDEL', pids, pid)
      redis.call('ZREM', expiry, pid)
    end
  end
end

-- The state of a PID, nil if none or expired; or nil and an error reply.
local function load_pid(pids, pid, now, expiry_ms)
  local raw, bad = read_checked('HGET', pids, pid)
  if bad then
    return nil, bad
  end
  if not raw then
    return nil
  end
  local state = cjson.decode(raw)
  if (state.t or 0) < now - expiry_ms then
    return nil
  end
  return state
end

-- Checks before any write that the expiry index is a zset (or absent).
local function check_expiry_index(expiry)
  local t = key_type(expiry)
  if t ~= 'none' and t ~= 'zset' then
    return fail(E.WRONG_TYPE, t, expiry)
  end
  return nil
end

local function save_pid(pids, expiry, pid, state, now)
  local indexed = state.x or 0
  state.t = now
  if now - indexed >= EXPIRY_INDEX_MS then
    state.x = now
    redis.call('ZADD', expiry, now, pid)
  end
  redis.call('HSET', pids, pid, cjson.encode(state))
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
