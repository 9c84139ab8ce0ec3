--[[
  pid_open: start a new incarnation of a named or resumed producer on one partition. The PID
  generation is bumped, which fences every older incarnation (their sends fail with
  PRODUCER_FENCED); the sequence and the duplicate window carry over (DESIGN 4b, G5).

  KEYS[1]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[2]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  KEYS[3]  producer names (hash)               <ns>:{<topic>/<p>}:names
  ARGV[1]  pid          the PID to use: the resumed one, or a fresh one for a new name
  ARGV[2]  name         the producer's name ('' if unnamed)
  ARGV[3]  resume_gen   the generation in the saved state ('' when not resuming)
  ARGV[4]  resume_next  the next sequence in the saved state ('' when not resuming)
  ARGV[5]  expiry_ms    producer state expires this long after its last write

  Returns {pid, generation, next_sequence}: a name already known keeps its PID; the next
    sequence is the saved one when resuming, else the one after the server's last.
  Errors: UNKNOWN_PRODUCER_ID (resume= names state that expired), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "producer"
--- @include "idempotence"

local pids, pid_expiry, names = KEYS[1], KEYS[2], KEYS[3]
local pid, name = ARGV[1], ARGV[2]
local resume_gen, resume_next = ARGV[3], ARGV[4]
local expiry_ms = int_arg(ARGV[5])
if expiry_ms == nil then
  return fail(E.BAD_ARGUMENT, 'expiry_ms', ARGV[5])
end
local bad = check_types({pids, pid_expiry, names}, {'hash', 'zset', 'hash'})
if bad then return bad end

local now = now_ms()
drop_expired(pids, pid_expiry, now, expiry_ms)
local gen = -1
if resume_gen ~= '' then
  gen = int_arg(resume_gen)
end
if name ~= '' then
  local owner = redis.call('HGET', names, name)
  if owner then
    local owner_pid, owner_gen = string.match(owner, '^(%S+) (%S+)$')
    if resume_gen == '' then
      pid = owner_pid
    end
    if owner_pid == pid then
      gen = math.max(gen, tonumber(owner_gen))
    end
  end
end

local state
state, bad = load_pid(pids, pid, now, expiry_ms)
if bad then return bad end
local next_seq
if state ~= nil then
  gen = math.max(gen, state.g) + 1
  state.g = gen
  next_seq = state.s + 1
  save_pid(pids, pid_expiry, pid, state, now)
else
  if resume_next ~= '' and int_arg(resume_next) > 0 then
    return fail(E.UNKNOWN_PRODUCER_ID, pid, 'resume-expired')
  end
  gen = gen + 1
  next_seq = 0
  save_pid(pids, pid_expiry, pid, new_pid_state(gen, -1), now)
end
if resume_next ~= '' then
  next_seq = int_arg(resume_next)
end
if name ~= '' then
  redis.call('HSET', names, name, pid .. ' ' .. gen)
end
return {pid, gen, next_seq}
