--[[
  resolve: settle a batch whose outcome is unknown (retries ran out, the reply was lost).
  If the batch is in the producer's window it landed: here are its offsets. Otherwise the
  PID generation on this partition is bumped, so no older copy of it can ever land (G5).

  Idempotent: a retry after a lost reply answers as the first attempt did. The bump makes
  the caller's session the PID's owner at generation pid_gen + 1, so a retry that finds
  exactly that knows the bump was its own (a newer incarnation would own the PID).

  KEYS[1]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[2]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  KEYS[3]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[4]  producer names and PID fences (hash) <ns>:{<topic>/<p>}:names
  ARGV[1]  pid        the producer's PID
  ARGV[2]  pid_gen    the generation the batch was sent with
  ARGV[3]  first_seq  the batch's first sequence
  ARGV[4]  last_seq   the batch's last sequence
  ARGV[5]  checksum   the batch's checksum
  ARGV[6]  session    the producer's session (the PID's owner)
  ARGV[7]  inc        the partition incarnation the caller saw (G9)
  ARGV[8]  pending_ms how long ago (client clock, ms) the batch was first sent

  Producer state expires after the partition's own expiry (its metadata's pidexp).

  Returns {landed, first_offset, generation, next_sequence}: landed 1 with the original first
    offset, or 0 (first_offset -1) with the new generation and the sequence to continue at.
  An expired state still stored answers by itself: the batch in its window landed; a batch
  past its last sequence never did (the state is created one generation up, to go on at
  the batch's sequence). With no state stored, a pending first batch (sequence 0) sent
  less than half the expiry ago never landed (had it landed, its state could not have
  expired yet); otherwise it may have landed and expired since: UNKNOWN_PRODUCER_ID. A batch in the window is reported as landed even if a newer incarnation
  exists (the caller must learn that it landed).
  Errors: UNKNOWN_PRODUCER_ID (the state expired: the outcome cannot be known),
    PRODUCER_FENCED (a newer incarnation exists), STATE_LOST (the partition vanished, or
    another producer object owns this PID at its generation), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "producer"
--- @include "idempotence"

local pids, pid_expiry, meta, names = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pid, pid_gen = ARGV[1], int_arg(ARGV[2])
local first_s, last_s, checksum = int_arg(ARGV[3]), int_arg(ARGV[4]), ARGV[5]
local session, pending_ms = ARGV[6], int_arg(ARGV[8])
if pending_ms == nil or pid_gen == nil or first_s == nil or last_s == nil or pid_gen < 0 or first_s < 0
    or last_s < first_s or session == '' then
  return fail(E.BAD_ARGUMENT, 'pid_gen/first_seq/last_seq/session',
    ARGV[2] .. '/' .. ARGV[3] .. '/' .. ARGV[4] .. '/' .. session)
end
local bad = check_types({pids, pid_expiry, names}, {'hash', 'zset', 'hash'})
if bad then return bad end
local expiry_ms
expiry_ms, bad = partition_pid_expiry(meta, ARGV[7])
if bad then return bad end
local now = now_ms()
local state
state, bad = load_pid(pids, pid, now, expiry_ms)
if bad then return bad end
if state == nil then
  -- Expired, but maybe still stored (until a cleanup drops it): by server time alone, it
  -- tells whether the batch landed. In its window: it did. Past its last sequence: it never
  -- did (landing writes the state) - the append refused it, the state having expired while
  -- the producer was idle - and no copy can land later (refused the same way, then fenced
  -- by the bump below).
  local raw = redis.call('HGET', pids, pid)
  local expired = raw and decode_pid(raw)
  local _
  if expired then
    local seen = find_batch(expired, first_s, last_s)
    if seen ~= nil and seen[3] == checksum then
      return {1, seen[4], expired.g, expired.s + 1}
    end
    if first_s <= expired.s then
      return fail(E.UNKNOWN_PRODUCER_ID, pid, 'pending-expired')
    end
    bad = check_pid_owner(expired, pid, pid_gen, session)
    if bad then return bad end
  elseif first_s ~= 0 or pending_ms * 2 >= expiry_ms then
    return fail(E.UNKNOWN_PRODUCER_ID, pid, 'pending-expired')
  end
  _, bad = check_fence(names, pid, pid_gen)
  if bad then return bad end
  -- It never landed (a first batch with no state at all, sent less than half the expiry
  -- ago, cannot have: its state would still be live). Create the state one generation up,
  -- to go on at the batch's first sequence, so that a copy still in flight is refused.
  state = new_pid_state(pid_gen, first_s - 1, session)
else
  local seen = find_batch(state, first_s, last_s)
  if seen ~= nil and seen[3] == checksum then
    return {1, seen[4], state.g, state.s + 1}
  end
  if state.g == pid_gen + 1 and state.o == session then
    -- This very call's earlier attempt bumped it (its reply was lost): the same answer.
    return {0, -1, state.g, state.s + 1}
  end
  bad = check_pid_owner(state, pid, pid_gen, session)
  if bad then return bad end
end
state.g = pid_gen + 1
state.o = session
save_pid(pids, pid_expiry, pid, state, now)
set_pid_fence(names, pid, state.g)
return {0, -1, state.g, state.s + 1}
