--[[
  pid_open: start a new incarnation of a named or resumed producer on one partition. The PID
  generation is bumped, which fences every older incarnation (their sends fail with
  PRODUCER_FENCED); the sequence and the duplicate window carry over (G5). The
  new incarnation's session becomes the PID's owner on this partition.

  Two openers of one name (or of one saved state) racing over the partitions are ordered by
  their tickets, drawn for the whole topic first (producer_ticket): an opener whose ticket
  is below the newest one a partition saw is refused there, so once both opens returned
  the higher ticket is the newest incarnation on every partition and the other is fenced
  everywhere, on a cluster too.

  KEYS[1]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[2]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  KEYS[3]  producer names (hash)               <ns>:{<topic>/<p>}:names
  KEYS[4]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[5]  the duplicate window (hash)         <ns>:{<topic>/<p>}:win
  ARGV[1]  pid          the PID to use: the resumed one, or a fresh one for a new name
  ARGV[2]  name         the producer's name ('' if unnamed)
  ARGV[3]  resume_gen   the generation in the saved state ('' when not resuming)
  ARGV[4]  resume_next  the next sequence in the saved state ('' when not resuming)
  ARGV[5]  session      the new incarnation's session (the PID's owner from now on)
  ARGV[6]  inc          the partition incarnation the caller saw (G9)
  ARGV[7]  ticket_key   'n:<name>' or 'p:<pid>': what the ticket orders ('' for none)
  ARGV[8]  ticket       the opener's ticket for it (an integer >= 1; '' for none)

  Producer state expires after the partition's own expiry (its metadata's pidexp).

  Returns {pid, generation, next_sequence, written_next}: a name already known keeps its
    PID; the next sequence is the saved one when resuming, else the one after the server's
    last (of its state, or of a state that expired and was removed: last_sequence);
    written_next is the one after the server's last (0 if none): a batch below it may be a
    resend, one at or above it was never sent by an older incarnation.
  Errors: PRODUCER_FENCED (reason 'incarnation': an opener with a higher ticket opened this
    partition already), UNKNOWN_PRODUCER_ID (resume= names state that expired),
    TOPIC_DELETING, STATE_LOST (the partition vanished or was recreated; a PID fresh from
    the counter already has state: the counter went backwards; reason 'pid-sequence': the
    saved state stands past what the partition keeps of the PID, so the store lost writes
    it had seen), WRONG_TYPE, BAD_ARGUMENT (a PID,
    generation or sequence that is not an integer in [0, 2^53)).
]]
--- @include "common"
--- @include "partition"
--- @include "pid_state"
--- @include "pid_fence"

local pids, pid_expiry, names, meta, win = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pid, name = ARGV[1], ARGV[2]
local resume_gen, resume_next, session = ARGV[3], ARGV[4], ARGV[5]
local pid_n = int_arg(pid)
if pid_n == nil or pid_n < 1 then
  return fail(E.BAD_ARGUMENT, 'pid', pid)
end
local gen, next_arg = -1, nil
if resume_gen ~= '' then
  gen = int_arg(resume_gen)
  if gen == nil or gen < 0 then
    return fail(E.BAD_ARGUMENT, 'resume_gen', resume_gen)
  end
end
if resume_next ~= '' then
  next_arg = int_arg(resume_next)
  if next_arg == nil or next_arg < 0 then
    return fail(E.BAD_ARGUMENT, 'resume_next', resume_next)
  end
end
if session == '' then
  return fail(E.BAD_ARGUMENT, 'session', '-')
end
local ticket_key, ticket = ARGV[7], int_arg(ARGV[8])
if ticket_key ~= '' and (ticket == nil or ticket < 1) then
  return fail(E.BAD_ARGUMENT, 'ticket', ARGV[8])
end
local bad = check_types({pids, pid_expiry, names, win}, {'hash', 'zset', 'hash', 'hash'})
if bad then return bad end
local expiry_ms, window = partition_pid_settings(meta, ARGV[6])
if not expiry_ms then return window end
bad = refuse_deleting(meta)
if bad then return bad end
if ticket_key ~= '' then
  local newest = tonumber(redis.call('HGET', names, '!' .. ticket_key) or '0')
  if newest > ticket then
    return fail(E.PRODUCER_FENCED, ticket, newest, 'incarnation')
  end
end

local now = now_ms()
-- Not resuming and no known name: the PID came from the producer-id counter just now.
local fresh_pid = resume_gen == ''
if name ~= '' then
  local owner = redis.call('HGET', names, name)
  if owner then
    fresh_pid = false
    local owner_pid, owner_gen = string.match(owner, '^(%S+) (%S+)$')
    if resume_gen == '' then
      pid = owner_pid
    end
    if owner_pid == pid then
      gen = math.max(gen, tonumber(owner_gen))
    end
  end
end

-- The state as stored, expired or not: an expired one still stored carries on (its
-- window still judges resends of what it wrote), instead of a fresh start below it.
local state
state, bad = load_stored_pid(pids, pid, now, expiry_ms)
if bad then return bad end
local fence
fence, bad = pid_fence(names, pid)
if bad then return bad end
if state == nil and fence >= 0 then
  -- The state expired, its fence did not: the new incarnation goes above it.
  gen = math.max(gen, fence)
end
if state ~= nil and fresh_pid then
  -- A PID just handed out by the counter already has live state: the counter went
  -- backwards (a failover lost its INCR). Taking the state over would fence its owner.
  return fail(E.STATE_LOST, 'pid-reused', pid, state.g)
end
local last = last_sequence(names, pid)
if state == nil and resume_gen ~= '' and fence < 0 and last < 0 and next_arg ~= nil
    and next_arg > 0 then
  -- The saved state says the PID wrote here, and the partition keeps no trace of it: no
  -- state, no fence (put up by its first batch, it never expires), no last sequence. The
  -- store lost those writes (G9): never taken for an expiry.
  return fail(E.STATE_LOST, 'pid-sequence', next_arg, -1)
end
if state == nil and resume_gen ~= '' and (fence >= 0 or (next_arg ~= nil and next_arg > 0)) then
  -- The PID wrote here (its fence, put up by its first batch, outlives its state) or the
  -- saved state says it did, and its state is gone: a resend of what it wrote could not
  -- be told from new records.
  return fail(E.UNKNOWN_PRODUCER_ID, pid, 'resume-expired')
end
if state ~= nil and next_arg ~= nil and next_arg > state.s + 1 then
  -- The saved state stands past every sequence the stored state wrote. A PID's sequences
  -- never start anew (a state removed leaves its last sequence, and a new one goes on
  -- after it), so the store went back past writes the saved state had seen (G9).
  return fail(E.STATE_LOST, 'pid-sequence', next_arg, state.s + 1)
end
-- Every check passed: the writes start here. The PID's own state, expired or not, is not
-- the cleanup's: it carries on below with its window.
drop_expired(pids, pid_expiry, win, names, now, expiry_ms, window, pid)
local next_seq, written_next
if state ~= nil then
  gen = math.max(gen, state.g) + 1
  state.g = gen
  state.o = session
  next_seq = state.s + 1
  written_next = next_seq
  save_pid(pids, pid_expiry, pid, state, now)
else
  -- A PID whose state expired and was removed goes on after the last sequence it wrote
  -- (a name reopened since): its sequences are never written twice, so a resend from a
  -- state saved before is refused as written before, never taken for new records.
  gen = gen + 1
  next_seq = last + 1
  written_next = next_seq
  replace_pid(pids, pid_expiry, win, pid, new_pid_state(gen, last, session), now, window)
end
if next_arg ~= nil then
  next_seq = next_arg
end
if name ~= '' then
  redis.call('HSET', names, name, pid .. ' ' .. gen)
end
set_pid_fence(names, pid, gen)
if ticket_key ~= '' then
  redis.call('HSET', names, '!' .. ticket_key, ticket)
end
return {pid, gen, next_seq, written_next}
