--[[
  The state of each producer id (PID) of idempotent producers on one partition (G5): its
  format, reading and writing it, whose it is, and removing the expired ones.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  Per partition:
  - pids (hash) PID -> state, one short string read and written on every append:

      "<g> <s> <t> <x> <o>;<b>"

    g the PID generation, s the last sequence written (-1: none), t the last write and x
    the last refresh of the expiry index (server ms), o the session of the producer object
    that owns the PID now (the one that created the state or opened the newest
    incarnation), b how many batches this state has recorded in its window
    (dedup_window.lua).
    A state written by an older version ("<g> <s> <t> <x> <o>|<window>...") is read with
    an empty window (b = 0): a resend of its batches is older than the window.
  - pidexp (zset) PID -> last write (refreshed at most once a minute), so expired states
    can be found and removed, a few per new registration.
  A state whose last write is older than the partition's expiry counts as gone for a fresh
  start, but while it is stored a resend is still judged by it: a batch at or below its
  last sequence was written before, whatever the clock says.

  The owner makes two things decidable that the generation alone cannot (G5, G9):
  - a resolve whose reply was lost sees, on its retry, a generation one above its own and
    itself as the owner: that bump was its own, so it answers as the first attempt did;
  - a producer object that is not the owner but presents the owner's generation got the
    same PID from a producer-id counter that went backwards (a failover lost the INCR):
    STATE_LOST, never a batch silently dropped as another producer's "duplicate".

  fencing/_protocol/producer.py (decode_pid_state) reads the same formats.
]]
--- @include "common"
--- @include "dedup_window"

-- Expired states removed at most per new registration (drop_expired).
local MAX_EXPIRE = 10
-- A state's expiry index entry is refreshed at most this often (ms).
local EXPIRY_INDEX_MS = 60000
-- g, s, t, x, o, b; a state written before the window moved out has no ';b'.
local STATE_RE = '^(%-?%d+) (%-?%d+) (%d+) (%d+) ([^|;]*);(%d+)$'
local OLD_STATE_RE = '^(%-?%d+) (%-?%d+) (%d+) (%d+) ?([^|;]*)'

-- A state's fields: g, s, t, x, b (numbers) and o; nil when raw is not a state. (+ 0
-- converts digits as tonumber does, without a C call.)
local function parse_pid(raw)
  local g, s, t, x, o, b = string.match(raw, STATE_RE)
  if g == nil then
    g, s, t, x, o = string.match(raw, OLD_STATE_RE)
    if g == nil then
      return nil
    end
    b = 0
  end
  return g + 0, s + 0, t + 0, x + 0, o, b + 0
end

-- A state's table: {g, s, t, x, o, b}, or nil when raw is not a state.
local function decode_pid(raw)
  local g, s, t, x, o, b = parse_pid(raw)
  if g == nil then
    return nil
  end
  return {g = g, s = s, t = t, x = x, o = o, b = b}
end

-- A state for a PID with nothing written yet (or nothing remembered), owned by a session.
local function new_pid_state(generation, last_seq, owner)
  return {g = generation, s = last_seq, t = 0, x = 0, o = owner, b = 0}
end

-- The state of a PID as stored, expired or not: raw and its fields (parse_pid); nil if
-- none; or false and an error reply. A state these scripts cannot read (another version's
-- format, or damaged) is STATE_LOST, never "none": taking it for absent would start the
-- PID afresh and drop its generation fence (G5, G9).
local function stored_pid(pids, pid)
  local raw, bad = read_checked('HGET', pids, pid)
  if bad then
    return false, bad
  end
  if not raw then
    return nil
  end
  local g, s, t, x, o, b = parse_pid(raw)
  if g == nil then
    return false, fail(E.STATE_LOST, 'pid-state', pid, pids)
  end
  return raw, g, s, t, x, o, b
end

-- The state of a PID as a table (decode_pid) and whether it is live (written within the
-- expiry); nil if none; or nil and an error reply.
local function load_stored_pid(pids, pid, now, expiry_ms)
  local raw, g, s, t, x, o, b = stored_pid(pids, pid)
  if not raw then
    return nil, g
  end
  return {g = g, s = s, t = t, x = x, o = o, b = b}, nil, t >= now - expiry_ms
end

-- True when the state belongs to another producer object than ``session`` (a state written
-- before owners were kept belongs to nobody in particular).
local function foreign_owner(state, session)
  return state.o ~= '' and state.o ~= session
end

-- The PID's state belongs to the caller: PRODUCER_FENCED if a newer incarnation exists,
-- STATE_LOST if another producer object owns it at the caller's generation (both were
-- handed the same PID: the counter went backwards). Returns nil, or an error reply.
-- (The state as its generation g and owner o.)
local function check_owner(g, o, pid, pid_gen, session)
  if pid_gen < g then
    return fail(E.PRODUCER_FENCED, pid_gen, g, 'pid-generation')
  end
  if o ~= '' and o ~= session then
    return fail(E.STATE_LOST, 'pid-reused', pid, g)
  end
  return nil
end

-- check_owner of a state table.
local function check_pid_owner(state, pid, pid_gen, session)
  return check_owner(state.g, state.o, pid, pid_gen, session)
end

-- Writes a state (a table) as last written at now; its expiry index entry is refreshed
-- once it is EXPIRY_INDEX_MS old.
local function save_pid(pids, expiry, pid, state, now)
  state.t = now
  if now - state.x >= EXPIRY_INDEX_MS then
    state.x = now
    redis.call('ZADD', expiry, now, pid)
  end
  redis.call('HSET', pids, pid,
    string.format('%d %d %d %d %s;%d', state.g, state.s, now, state.x, state.o, state.b))
end

-- Records batch first .. last (digest, first offset, the records answered by message ids:
-- '' or nil for none) as the state's next: one HSET of its window slot and one of the state
-- (generation g, owner o, b batches recorded before, the expiry index refreshed at x),
-- written at now.
local function save_batch(pids, expiry, win, pid, now, g, o, x, b, window, first, last, digest,
    offset, answers)
  if now - x >= EXPIRY_INDEX_MS then
    x = now
    redis.call('ZADD', expiry, now, pid)
  end
  local entry = string.format('%d %d %s %d', first, last, digest, offset)
  if answers and answers ~= '' then
    entry = entry .. ' ' .. answers
  end
  redis.call('HSET', win, window_slot(pid, b, window), entry)
  redis.call('HSET', pids, pid, string.format('%d %d %d %d %s;%d', g, last, now, x, o, b + 1))
end

-- The last sequence a PID wrote on this partition before its state expired and was
-- removed (drop_expired), -1 if none: a new state of the PID goes on after it. Kept in the
-- names hash under '^<pid>' (names cannot start with '^') for the topic's life, as the
-- PID's fence is.
local function last_sequence(names, pid)
  return tonumber(redis.call('HGET', names, '^' .. pid) or '-1')
end

-- A new state for a PID replaces whatever is stored for it: the window of a stored one
-- (expired, or of another generation) is removed first, so no stale slot outlives it.
local function replace_pid(pids, expiry, win, pid, state, now, window)
  local old = redis.call('HGET', pids, pid)
  local stored = old and decode_pid(old)
  if stored then
    drop_window(win, pid, stored.b, window)
  end
  save_pid(pids, expiry, pid, state, now)
end

-- Removes a few states whose last write is older than the expiry, with their windows. The
-- index score can be up to EXPIRY_INDEX_MS behind a state's real last write, so each
-- candidate's own last write decides: a live one is re-indexed, never removed. A state
-- these scripts cannot read is never removed either (it is not absent): it is re-indexed at
-- now, so it does not hold up the expiry of others. The state of ``keep`` (the PID the
-- caller is carrying on, expired or not; nil for none) is left as it is: its caller
-- rewrites it, and its window, which still answers resends of what it wrote, with it.
-- A removed state leaves its last sequence in the names hash (last_sequence): a PID's
-- sequences are never written twice, also by a name reopened after its state went.
local function drop_expired(pids, expiry, win, names, now, expiry_ms, window, keep)
  local candidates = redis.call('ZRANGEBYSCORE', expiry, '-inf', now - expiry_ms, 'LIMIT', 0,
    MAX_EXPIRE)
  for _, pid in ipairs(candidates) do
    local raw = pid ~= keep and redis.call('HGET', pids, pid)
    local state = raw and decode_pid(raw)
    if raw and not state then
      redis.call('ZADD', expiry, now, pid)
    elseif state and state.t >= now - expiry_ms then
      redis.call('ZADD', expiry, state.t, pid)
    elseif pid ~= keep then
      if state then
        drop_window(win, pid, state.b, window)
        redis.call('HSET', names, '^' .. pid, string.format('%d', state.s))
      end
      redis.call('HDEL', pids, pid)
      redis.call('ZREM', expiry, pid)
    end
  end
end
