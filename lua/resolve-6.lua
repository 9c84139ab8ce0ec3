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
  KEYS[5]  the duplicate window (hash)         <ns>:{<topic>/<p>}:win
  KEYS[6]  the partition's stream              <ns>:{<topic>/<p>}:log
  ARGV[1]  pid        the producer's PID
  ARGV[2]  pid_gen    the generation the batch was sent with
  ARGV[3]  first_seq  the batch's first sequence
  ARGV[4]  last_seq   the batch's last sequence
  ARGV[5]  digest     the batch's digest
  ARGV[6]  session    the producer's session (the PID's owner)
  ARGV[7]  inc        the partition incarnation the caller saw (G9)
  ARGV[8]  pending_ms how long ago (client clock, ms) the batch was first sent
  ARGV[9]  fresh      1 if the batch was sent as one never sent before (the append's fresh
                      flag), else 0: a resend of an older batch may have landed long before
                      it went pending, so its age proves nothing

  Producer state expires after the partition's own expiry (its metadata's pidexp); the
  window is the partition's own size (dedupw).

  Returns {landed, first_offset, generation, next_sequence, epoch[, answers]}: landed 1 with
    the original first offset and the epoch its records carry (a newer incarnation may have
    written it, resent under its own epoch; -1 once retention trimmed it away), and the
    records its call answered by their message ids ('' for none; see append-9.lua), or 0
    (first_offset -1, epoch -1) with the new generation and the sequence to continue at.
    next_sequence is the PID's last written sequence + 1: when landed, the caller goes on
    after the resolved batch itself (a resumed producer's resend of an old batch may be
    resolved while later batches stand written, to be resent as duplicates), and below
    next_sequence no batch is fresh.
  An expired state still stored answers by itself: the batch in its window landed; a batch
  past its last sequence never did (the state is created one generation up, to go on at
  the batch's sequence). With no state stored, a pending fresh batch sent less than half
  the expiry ago never landed (had it landed, its state could not have expired and been
  dropped yet); otherwise it may have landed and expired since: UNKNOWN_PRODUCER_ID. A
  batch in the window is reported as landed even if a newer incarnation exists (the caller
  must learn that it landed).
  Errors: DUPLICATE_SEQUENCE (as the append's: the batch's sequences were written before
    and the window cannot answer it), UNKNOWN_PRODUCER_ID (the state expired: the outcome
    cannot be known),
    PRODUCER_FENCED (a newer incarnation exists), STATE_LOST (the partition vanished, or
    another producer object owns this PID at its generation), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "partition"
--- @include "pid_state"
--- @include "pid_fence"
--- @include "resend"

local pids, pid_expiry, meta, names, win, stream =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local pid, pid_gen = ARGV[1], int_arg(ARGV[2])
local first_s, last_s, digest = int_arg(ARGV[3]), int_arg(ARGV[4]), ARGV[5]
local session, pending_ms, fresh = ARGV[6], int_arg(ARGV[8]), ARGV[9]
if (fresh ~= '0' and fresh ~= '1') or pending_ms == nil or pid_gen == nil or first_s == nil
    or last_s == nil or pid_gen < 0 or first_s < 0 or last_s < first_s or session == '' then
  return fail(E.BAD_ARGUMENT, 'pid_gen/first_seq/last_seq/session',
    ARGV[2] .. '/' .. ARGV[3] .. '/' .. ARGV[4] .. '/' .. session)
end
local bad = check_types({pids, pid_expiry, names, win}, {'hash', 'zset', 'hash', 'hash'})
if bad then return bad end
local expiry_ms, window
expiry_ms, window = partition_pid_settings(meta, ARGV[7])
if not expiry_ms then return window end
local now = now_ms()
local state, live
state, bad, live = load_stored_pid(pids, pid, now, expiry_ms)
if bad then return bad end
-- A batch at or below the last sequence is judged by the window, live or expired (until a
-- cleanup drops it): in it, it landed; else it is refused as the append would refuse it
-- (its sequences were written before: older than the window, by other records, or it
-- straddles the last one) - never "did not land", which would let the producer write
-- those sequences' records again under new ones.
if state ~= nil and first_s <= state.s then
  local seen
  seen, bad = judge_resend(win, pid, state.b, window, state.s, first_s, last_s, digest)
  if bad then return bad end
  return {1, seen[4], state.g, state.s + 1, tonumber(written_epoch(stream, seen[4])), seen[5]}
end
if state ~= nil and live then
  if state.g == pid_gen + 1 and state.o == session then
    -- This very call's earlier attempt bumped it (its reply was lost): the same answer.
    return {0, -1, state.g, state.s + 1, -1}
  end
  bad = check_pid_owner(state, pid, pid_gen, session)
  if bad then return bad end
else
  local _
  if state ~= nil then
    -- Expired. Past its last sequence the batch never landed (landing writes the state):
    -- the append refused it, the state having expired meanwhile, and no copy can land
    -- later (refused the same way, then fenced by the bump below).
    bad = check_pid_owner(state, pid, pid_gen, session)
    if bad then return bad end
  elseif pending_ms * 2 >= expiry_ms or fresh ~= '1' then
    return fail(E.UNKNOWN_PRODUCER_ID, pid, 'pending-expired')
  end
  _, bad = check_fence(names, pid, pid_gen)
  if bad then return bad end
  -- It never landed (a fresh batch with no state stored at all, first sent less than half
  -- the expiry ago, cannot have: landing writes the state, which could not have expired
  -- and been dropped since). Create the state one generation up, to go on at the batch's first
  -- sequence, so that a copy still in flight is refused.
  local old_b = state and state.b or 0
  drop_window(win, pid, old_b, window)
  state = new_pid_state(pid_gen, first_s - 1, session)
end
state.g = pid_gen + 1
state.o = session
save_pid(pids, pid_expiry, pid, state, now)
set_pid_fence(names, pid, state.g)
return {0, -1, state.g, state.s + 1, -1}
