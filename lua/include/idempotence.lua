--[[
  Idempotent producers (seed 003, DESIGN G5). Needs common.lua.

  Per partition: a hash PID -> state, and a zset PID -> last write (refreshed at most once a
  minute) so expired states can be found and removed, a few per new registration. A state
  whose last write is older than the expiry counts as gone even before it is removed.
  Memory is O(live producers x 5 batches), never O(records).

  A state is one string, read and written whole on every append, so it is kept cheap to
  parse (one anchored match; no JSON: a cjson decode and encode cost more than the rest of
  the append's checks):

    "<g> <s> <t> <x> <o>|<first> <last> <checksum> <offset>|..."

  g the PID generation, s the last sequence written (-1: none), t the last write and x the
  last time the expiry index was refreshed (server ms), o the session of the producer object
  that owns the PID now (the one that created the state or opened the newest incarnation;
  absent in states written before it existed), then the window: the last 5 batches, newest
  first, each with its sequence range, checksum and first offset.
  fencing/protocol/producer.py (decode_pid_state) reads the same format.

  The owner makes two things decidable that the generation alone cannot (G5, G9):
  - a resolve whose reply was lost sees, on its retry, a generation one above its own and
    itself as the owner: that bump was its own, so it answers as the first attempt did;
  - a producer object that is not the owner but presents the owner's generation got the
    same PID from a producer-id counter that went backwards (a failover lost the INCR):
    STATE_LOST, never a batch silently dropped as another producer's "duplicate".

  The expiry is the partition's own (field pidexp of its metadata, fixed when the topic was
  created), never an argument of the caller: one client's setting cannot expire the state of
  producers that run with another.
]]

local WINDOW = 5
local MAX_EXPIRE = 10
local EXPIRY_INDEX_MS = 60000
-- g, s, t, x, o, then the position of the window (its first bar, or past the end).
local STATE_RE = '^(%-?%d+) (%-?%d+) (%d+) (%d+) ?([^|]*)()'
-- The first WINDOW - 1 entries of a window (all of them if fewer): the ones a new batch
-- keeps. One '|?[^|]*' per entry: change both together.
local KEPT_RE = '^|?[^|]*|?[^|]*|?[^|]*|?[^|]*'

-- A state's fields: g, s, t, x (numbers), o, and the position of its window in raw; nil
-- when raw is not a state. (+ 0 converts digits as tonumber does, without a C call.)
local function parse_pid(raw)
  local g, s, t, x, o, w = string.match(raw, STATE_RE)
  if g == nil then
    return nil
  end
  return g + 0, s + 0, t + 0, x + 0, o, w
end

-- A state's table: {g, s, t, x, o, win = the window as stored ('' or '|...|...')}.
local function decode_pid(raw)
  local g, s, t, x, o, w = parse_pid(raw)
  if g == nil then
    return nil
  end
  return {g = g, s = s, t = t, x = x, o = o, win = string.sub(raw, w)}
end

-- A state for a PID with nothing written yet (or nothing remembered), owned by a session.
local function new_pid_state(generation, last_seq, owner)
  return {g = generation, s = last_seq, t = 0, x = 0, o = owner, win = ''}
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

-- A PID with no state (first batch, or its state expired) may start afresh at pid_gen only
-- if no newer incarnation was opened (PRODUCER_FENCED) and, above generation 0, only if the
-- fence or the name vouches for exactly that generation (else UNKNOWN_PRODUCER_ID: its
-- fence is unknown). Returns nil, or an error reply.
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

-- The producer state expiry of a partition, from its metadata (KEYS of the caller), checked
-- against the partition incarnation the caller saw (G9). Returns expiry_ms, or nil and an
-- error reply.
local function partition_pid_expiry(meta, seen_inc)
  local v, bad = read_checked('HMGET', meta, 'inc', 'pidexp')
  if bad then
    return nil, bad
  end
  if not v[1] then
    return nil, fail(E.STATE_LOST, 'missing', seen_inc, '-')
  end
  if v[1] ~= seen_inc then
    return nil, fail(E.STATE_LOST, 'incarnation', seen_inc, v[1])
  end
  return tonumber(v[2] or DEFAULT_PID_EXPIRY_MS)
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

-- The state of a PID as stored and its fields (parse_pid); nil if none or expired; or false
-- and an error reply. A state these scripts cannot read (another version's format, or
-- damaged) is STATE_LOST, never "none": taking it for absent would start the PID afresh
-- and drop its generation fence (G5, G9).
local function read_pid(pids, pid, now, expiry_ms)
  local raw, bad = read_checked('HGET', pids, pid)
  if bad then
    return false, bad
  end
  if not raw then
    return nil
  end
  local g, s, t, x, o, w = parse_pid(raw)
  if g == nil then
    return false, fail(E.STATE_LOST, 'pid-state', pid, pids)
  end
  if t < now - expiry_ms then
    return nil
  end
  return raw, g, s, t, x, o, w
end

-- The state of a PID as a table (decode_pid), nil if none or expired; or nil and an error
-- reply (read_pid).
local function load_pid(pids, pid, now, expiry_ms)
  local raw, g, s, t, x, o, w = read_pid(pids, pid, now, expiry_ms)
  if not raw then
    return nil, g
  end
  return {g = g, s = s, t = t, x = x, o = o, win = string.sub(raw, w)}
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
  -- One format call (this runs on every append); an owner-less state gets a trailing space
  -- before its window, which both readers take as "no owner".
  redis.call('HSET', pids, pid,
    string.format('%d %d %d %d %s%s', state.g, state.s, now, state.x, state.o, state.win))
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
  -- Newest first: keep WINDOW - 1 of the old entries.
  state.win = string.format('|%d %d %s %d%s', first, last, checksum, offset,
    string.match(state.win, KEPT_RE))
end

-- remember_batch and save_pid in one: the state of generation g and owner o, last written
-- at now, whose window is that of raw from position w (raw nil: none) and whose expiry
-- index was refreshed at x, takes the batch first .. last (checksum, first offset). One
-- string.format for the whole state (this runs on every append).
local function save_batch(pids, expiry, pid, now, g, o, x, raw, w, first, last, checksum,
    offset)
  if now - x >= EXPIRY_INDEX_MS then
    x = now
    redis.call('ZADD', expiry, now, pid)
  end
  redis.call('HSET', pids, pid, string.format('%d %d %d %d %s|%d %d %s %d%s', g, last, now, x,
    o, first, last, checksum, offset, raw and string.match(raw, KEPT_RE, w) or ''))
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
