--[[
  The duplicate window of idempotent producers on one partition (G5): the last batches of
  each PID, so that a resend of one of them is answered with its original offsets instead
  of being written again. Naming, reading and removing its slots; a batch is recorded by
  save_batch (pid_state.lua), together with the state that counts it.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  win (hash) "<pid>:<slot>" -> "<first> <last> <digest> <offset>[ <answers>]" (answers:
  the records a call answered by their message ids, "i:offset:epoch,...", see
  message_ids.lua; the others were written from offset on), a ring of W slots per
  PID (W: the partition's dedupw, fixed when the topic was created). Batch number k of a
  state lives in slot k % W, so recording a batch is one HSET and overwrites the batch W
  older: the per-send work does not grow with W. The window of a state that recorded b
  batches holds batches max(0, b - W) .. b - 1; their first sequences increase along it,
  so a resend is found by a binary search (log2 W reads), and only a resend pays it.
]]
--- @include "common"

-- The window field of batch number k of a PID.
local function window_slot(pid, k, window)
  return pid .. ':' .. string.format('%d', k % window)
end

-- Removes a PID's window (the slots its state can have written), 500 fields per HDEL.
-- (unpack is a global in Redis's Lua 5.1, table.unpack in the later Lua of fakeredis.)
local function drop_window(win, pid, b, window)
  local spread = unpack or table.unpack
  local n = math.min(b, window)
  local i = 0
  while i < n do
    local fields = {}
    for k = i, math.min(n, i + 500) - 1 do
      fields[#fields + 1] = window_slot(pid, k, window)
    end
    redis.call('HDEL', win, spread(fields))
    i = i + 500
  end
end

-- The window entry of batch number k as {first, last, digest, offset, answers}, or nil.
local function window_entry(win, pid, k, window)
  local raw = redis.call('HGET', win, window_slot(pid, k, window))
  if not raw then
    return nil
  end
  local f, l, d, o, a = string.match(raw, '^(%d+) (%d+) (%S+) (%d+) ?(%S*)$')
  if f == nil then
    return nil
  end
  return {f + 0, l + 0, d, o + 0, a}
end

-- The window entry whose first sequence is ``first`` in the window of a state that
-- recorded b batches, or nil and the first sequence of the oldest batch it holds (nil when
-- it holds none). A binary search: first sequences increase along the window.
local function find_batch(win, pid, b, window, first)
  local lo, hi = math.max(0, b - window), b - 1
  if hi < lo then
    return nil, nil
  end
  local oldest = window_entry(win, pid, lo, window)
  if oldest == nil then
    return nil, nil
  end
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local e = window_entry(win, pid, mid, window)
    if e == nil then
      return nil, oldest[1]
    end
    if e[1] == first then
      return e, oldest[1]
    elseif e[1] < first then
      lo = mid + 1
    else
      hi = mid - 1
    end
  end
  return nil, oldest[1]
end
