--[[
  Which incarnation of a producer may write on one partition (G5, G9): the PID's fence and
  the producer's name, both kept in the partition's names hash.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  names (hash), per partition (producer names match [A-Za-z0-9._-], so the prefixes below
  never clash with one):
    <name>         "<pid> <generation>" of the newest incarnation of a named producer
    #<pid>         the PID's fence (pid_fence)
    ^<pid>         the PID's last sequence when its state was removed (pid_state.lua's
                   last_sequence)
    !<ticket key>  the highest ticket an opener of that key presented here (pid_open-5.lua)
]]
--- @include "common"

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

-- Sets the PID's fence to generation (its callers only ever raise it).
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
