--[[
  resolve: settle a batch whose outcome is unknown (retries ran out, the reply was lost).
  If the batch is in the producer's window it landed: here are its offsets. Otherwise the
  PID generation on this partition is bumped, so no older copy of it can ever land (G5).

  KEYS[1]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[2]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  ARGV[1]  pid        the producer's PID
  ARGV[2]  pid_gen    the generation the batch was sent with
  ARGV[3]  first_seq  the batch's first sequence
  ARGV[4]  last_seq   the batch's last sequence
  ARGV[5]  checksum   the batch's checksum
  ARGV[6]  expiry_ms  producer state expires this long after its last write

  Returns {landed, first_offset, generation, next_sequence}: landed 1 with the original first
    offset, or 0 (first_offset -1) with the new generation and the sequence to continue at.
  A pending first batch (sequence 0) with no state never landed: the state is created one
  generation up. A batch in the window is reported as landed even if a newer incarnation
  exists (the caller must learn that it landed).
  Errors: UNKNOWN_PRODUCER_ID (the state expired: the outcome cannot be known),
    PRODUCER_FENCED (a newer incarnation exists), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "producer"
--- @include "idempotence"

local pids, pid_expiry = KEYS[1], KEYS[2]
local pid, pid_gen = ARGV[1], int_arg(ARGV[2])
local first_s, last_s, checksum = int_arg(ARGV[3]), int_arg(ARGV[4]), ARGV[5]
if pid_gen == nil or first_s == nil or last_s == nil then
  return fail(E.BAD_ARGUMENT, 'pid_gen/first_seq/last_seq', ARGV[2] .. '/' .. ARGV[3])
end
local bad = check_types({pids, pid_expiry}, {'hash', 'zset'})
if bad then return bad end
local now = now_ms()
local state
state, bad = load_pid(pids, pid, now, int_arg(ARGV[6]) or 0)
if bad then return bad end
if state == nil then
  if first_s ~= 0 then
    return fail(E.UNKNOWN_PRODUCER_ID, pid, 'pending-expired')
  end
  -- The producer's very first batch: no state means it never landed. Create the state one
  -- generation up, so that a copy still in flight is refused.
  state = new_pid_state(pid_gen, -1)
else
  local seen = find_batch(state, first_s, last_s)
  if seen ~= nil and seen[3] == checksum then
    return {1, seen[4], state.g, state.s + 1}
  end
  if pid_gen < state.g then
    return fail(E.PRODUCER_FENCED, pid_gen, state.g, 'pid-generation')
  end
end
state.g = state.g + 1
save_pid(pids, pid_expiry, pid, state, now)
return {0, -1, state.g, state.s + 1}
