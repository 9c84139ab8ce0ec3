--[[
  Idempotent producers (seed 003, DESIGN G5). Needs common.lua.

  Per partition: a hash PID -> state, and a zset PID -> last write (refreshed at most once a
  minute) so expired states can be found and removed, a few per new registration. A state
  whose last write is older than the expiry counts as gone even before it is removed.
  Memory is O(live producers x 5 batches), never O(records).

  A state is one string, read and written whole on every append, so it is kept cheap to
  parse (one anchored match; no JSON: a cjson decode and encode cost more than the rest of
  the append's checks):

    "<g> <s> <t> <x>|<first> <last> <checksum> <offset>|..."

  g the PID generation, s the last sequence written (-1: none), t the last write and x the
  last time the expiry index was refreshed (server ms), then the window: the last 5 batches,
  newest first, each with its sequence range, checksum and first offset.
  fencing/protocol/producer.py (decode_pid_state) reads the same format.
]]

local WINDOW = 5
local MAX_EXPIRE = 10
local EXPIRY_INDEX_MS = 60000
local STATE_RE = '^(%-?%d+) (%-?%d+) (%d+) (%d+)'

-- A state's table: {g, s, t, x, win = the window as stored ('' or '|...|...')}.
local function decode_pid(raw)
  local g, s, t, x = string.match(raw, STATE_RE)
  if g == nil then
    return nil
  end
  local bar = string.find(raw, '|', 1, true)
  return {g = tonumber(g), s = tonumber(s), t = tonumber(t), x = tonumber(x),
    win = bar and string.sub(raw, bar) or ''}
end

-- A state for a PID with nothing written yet (or nothing remembered).
local function new_pid_state(generation, last_seq)
  return {g = generation, s = last_seq, t = 0, x = 0, win = ''}
end

-- Removes a few states whose last write is older than the expiry. The index score can be
-- up to EXPIRY_INDEX_MS behind a state's real last write, so each candidate's own last
-- write decides: a live one is re-indexed, never removed. A state these scripts cannot
-- read is never removed either (load_pid refuses to treat it as absent): it is re-indexed
-- at now, so it does not hold up the expiry of others.
local function drop_expired(pids, expiry, now, expiry_ms)
  local candidates = redis.call('ZRANGEBYSCORE', expiry, '-inf', now - expiry_ms, 'LIMIT', 0,
    MAX_EXPIRE)
  for _, pid in ipairs(candidates) do
    local raw = redis.call('HGET', pids, pid)
    local state = raw and decode_pid(raw)
    if raw and not state then
      redis.call('ZADD', expiry, now, pid)
    elseif state and state.t >= now - expiry_ms then
      redis.call('ZADD', expiry, state.t, pid)
    else
      redis.call('HDEL', pids, pid)
      redis.call('ZREM', expiry, pid)
    end
  end
end

-- The state of a PID, nil if none or expired; or nil and an error reply. A state these
-- scripts cannot read (another version's format, or damaged) is STATE_LOST, never "none":
-- taking it for absent would start the PID afresh and drop its generation fence (G5, G9).
local function load_pid(pids, pid, now, expiry_ms)
  local raw, bad = read_checked('HGET', pids, pid)
  if bad then
    return nil, bad
  end
  if not raw then
    return nil
  end
  local state = decode_pid(raw)
  if state == nil then
    return nil, fail(E.STATE_LOST, 'pid-state', pid, pids)
  end
  if state.t < now - expiry_ms then
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
  state.t = now
  if now - state.x >= EXPIRY_INDEX_MS then
    state.x = now
    redis.call('ZADD', expiry, now, pid)
  end
  redis.call('HSET', pids, pid,
    string.format('%d %d %d %d', state.g, state.s, now, state.x) .. state.win)
end

-- The window entry of exactly this batch as {first, last, checksum, first_offset}, or nil.
local function find_batch(state, first, last)
  for f, l, c, o in string.gmatch(state.win, '|(%d+) (%d+) (%S+) (%d+)') do
    if tonumber(f) == first and tonumber(l) == last then
      return {first, last, c, tonumber(o)}
    end
  end
  return nil
end

local function remember_batch(state, first, last, checksum, offset)
  state.s = last
  -- Newest first: keep WINDOW - 1 of the old entries, i.e. cut at the WINDOW'th bar.
  local win, cut = state.win, 0
  for _ = 1, WINDOW do
    cut = string.find(win, '|', cut + 1, true)
    if cut == nil then
      break
    end
  end
  if cut ~= nil then
    win = string.sub(win, 1, cut - 1)
  end
  state.win = string.format('|%d %d %s %d', first, last, checksum, offset) .. win
end
