--[[
  Idempotent producers (G5): the state of each producer id (PID) on one partition, and its
  duplicate window. Needs common.lua.

  Per partition:
  - pids (hash) PID -> state, one short string read and written on every append:

      "<g> <s> <t> <x> <o>;<b>"

    g the PID generation, s the last sequence written (-1: none), t the last write and x
    the last refresh of the expiry index (server ms), o the session of the producer object
    that owns the PID now (the one that created the state or opened the newest
    incarnation), b how many batches this state has recorded in its window.
    A state written by an older version ("<g> <s> <t> <x> <o>|<window>...") is read with
    an empty window (b = 0): a resend of its batches is older than the window.
  - pidexp (zset) PID -> last write (refreshed at most once a minute), so expired states
    can be found and removed, a few per new registration.
  - win (hash) the duplicate window: "<pid>:<slot>" -> "<first> <last> <digest> <offset>",
    a ring of W slots per PID (W: the partition's dedupw, fixed when the topic was created).
    Batch number k of a state lives in slot k % W, so recording a batch is one HSET and
    overwrites the batch W older: the per-send work does not grow with W. The window holds
    batches max(0, b - W) .. b - 1; their first sequences increase along it, so a resend is
    found by a binary search (log2 W reads), and only a resend pays it.
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

local MAX_EXPIRE = 10
local EXPIRY_INDEX_MS = 60000
-- Window size of partitions created before it was kept in their metadata.
local DEFAULT_DEDUP_WINDOW = 5
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

-- True when the state belongs to another producer object than ``session`` (a state written
-- before owners were kept belongs to nobody in particular).
local function foreign_owner(state, session)
  return state.o ~= '' and state.o ~= session
end

-- The fence of a PID on this partition: the highest generation any incarnation of it was
-- opened (resume=, a name) or resolved at, -1 if none. Kept in the names hash under
-- '#<pid>' (names cannot start with '#') and never expired, unlike the PID's state: an
-- incarnation whose state expired is still judged by it, so a fenced one cannot start
-- afresh and the newest one can. Returns the fence, or nil and an error reply.
local function pid_fence(names, pid)
  local raw, bad = read_checked('HGET', names, '#' .. pid)
  if bad then
    return nil, bad
  end
  return tonumber(raw or '-1')
end

local function set_pid_fence(names, pid, generation)
  redis.call('HSET', names, '#' .. pid, generation)
end

-- PRODUCER_FENCED if the PID's fence is above pid_gen (a newer incarnation was opened);
-- returns the fence, or nil and an error reply.
local function check_fence(names, pid, pid_gen)
  local fence, bad = pid_fence(names, pid)
  if bad then
    return nil, bad
  end
  if fence > pid_gen then
    return nil, fail(E.PRODUCER_FENCED, pid_gen, fence, 'pid-generation')
  end
  return fence
end

-- A PID with no live state (first batch, or its state expired) may start afresh at pid_gen
-- only if no newer incarnation was opened (PRODUCER_FENCED) and, above generation 0, only
-- if the fence or the name vouches for exactly that generation (else UNKNOWN_PRODUCER_ID:
-- its fence is unknown). Returns nil, or an error reply.
local function check_fresh_start(names, pid, pid_gen, name_vouches)
  local fence, bad = check_fence(names, pid, pid_gen)
  if bad then
    return bad
  end
  if pid_gen > 0 and fence ~= pid_gen and not name_vouches then
    return fail(E.UNKNOWN_PRODUCER_ID, pid, 'expired')
  end
  return nil
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

local function check_pid_owner(state, pid, pid_gen, session)
  return check_owner(state.g, state.o, pid, pid_gen, session)
end

-- The producer state expiry and duplicate window of a partition, from its metadata (KEYS
-- of the caller), checked against the partition incarnation the caller saw (G9). Returns
-- expiry_ms, window, or nil and an error reply.
local function partition_pid_settings(meta, seen_inc)
  local v, bad = read_checked('HMGET', meta, 'inc', 'pidexp', 'dedupw')
  if bad then
    return nil, bad
  end
  bad = check_incarnation(v[1], seen_inc)
  if bad then
    return nil, bad
  end
  return tonumber(v[2] or DEFAULT_PID_EXPIRY_MS), tonumber(v[3] or DEFAULT_DEDUP_WINDOW)
end

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

-- Removes a few states whose last write is older than the expiry, with their windows. The
-- index score can be up to EXPIRY_INDEX_MS behind a state's real last write, so each
-- candidate's own last write decides: a live one is re-indexed, never removed. A state
-- these scripts cannot read is never removed either (it is not absent): it is re-indexed at
-- now, so it does not hold up the expiry of others.
local function drop_expired(pids, expiry, win, now, expiry_ms, window)
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
      if state then
        drop_window(win, pid, state.b, window)
      end
      redis.call('HDEL', pids, pid)
      redis.call('ZREM', expiry, pid)
    end
  end
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

-- The live state of a PID as a table, nil if none or expired; or nil and an error reply.
local function load_pid(pids, pid, now, expiry_ms)
  local state, bad, live = load_stored_pid(pids, pid, now, expiry_ms)
  if state == nil or not live then
    return nil, bad
  end
  return state
end

-- Checks before any write that a key is of the type a script writes (or absent).
local function check_type_or_none(key, wanted)
  local t = key_type(key)
  if t ~= 'none' and t ~= wanted then
    return fail(E.WRONG_TYPE, t, key)
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
    string.format('%d %d %d %d %s;%d', state.g, state.s, now, state.x, state.o, state.b))
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

-- The window entry of batch number k as {first, last, digest, offset}, or nil.
local function window_entry(win, pid, k, window)
  local raw = redis.call('HGET', win, window_slot(pid, k, window))
  if not raw then
    return nil
  end
  local f, l, d, o = string.match(raw, '^(%d+) (%d+) (%S+) (%d+)$')
  if f == nil then
    return nil
  end
  return {f + 0, l + 0, d, o + 0}
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

-- A batch first .. last at or below a state's last sequence s (a resend of sequences that
-- were written before): its window entry if it is exactly a batch of the window with the
-- same digest, else nil and an error reply naming why it cannot be answered:
--   straddles          it also holds sequences past s: refused whole (resend with the
--                      batch boundaries used before);
--   other-records      its range is in the window but was written by other records (or
--                      cuts across the window's batches);
--   older-than-window  it is older than the window: written before, offsets forgotten.
local function judge_resend(win, pid, b, window, s, first, last, digest)
  if last > s then
    return nil, fail(E.DUPLICATE_SEQUENCE, pid, first, last, 'straddles')
  end
  local seen, oldest = find_batch(win, pid, b, window, first)
  if seen ~= nil and seen[2] == last and seen[3] == digest then
    return seen
  end
  local reason = (oldest ~= nil and first >= oldest) and 'other-records' or 'older-than-window'
  return nil, fail(E.DUPLICATE_SEQUENCE, pid, first, last, reason)
end

-- Records batch first .. last (digest, first offset) as the state's next: one HSET of its
-- window slot and one of the state (generation g, owner o, b batches recorded before, the
-- expiry index refreshed at x), written at now.
local function save_batch(pids, expiry, win, pid, now, g, o, x, b, window, first, last, digest,
    offset)
  if now - x >= EXPIRY_INDEX_MS then
    x = now
    redis.call('ZADD', expiry, now, pid)
  end
  redis.call('HSET', win, window_slot(pid, b, window),
    string.format('%d %d %s %d', first, last, digest, offset))
  redis.call('HSET', pids, pid, string.format('%d %d %d %d %s;%d', g, last, now, x, o, b + 1))
end

-- A named producer (idempotent or not) must be the newest incarnation of its name: the
-- names hash maps a name to "<pid> <generation>" of that incarnation. Returns true when
-- the name vouches for (pid, pid_gen), false for an unnamed producer or an unknown name,
-- or nil and an error reply (PRODUCER_FENCED, WRONG_TYPE).
local function check_name(names, name, pid, pid_gen)
  if name == '' then
    return false
  end
  local owner, bad = read_checked('HGET', names, name)
  if bad then
    return nil, bad
  end
  if not owner then
    return false
  end
  local owner_pid, owner_gen = string.match(owner, '^(%S+) (%S+)$')
  if owner_pid ~= pid or tonumber(owner_gen) > pid_gen then
    return nil, fail(E.PRODUCER_FENCED, pid_gen, tonumber(owner_gen), 'name')
  end
  return true
end
