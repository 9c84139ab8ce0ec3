--[[
  producer_renew: extend an exclusive holder's or a shared producer's lease (every ttl/3,
  off the hot path). A lapsed lease is renewed as long as the epoch did not move, and as
  long as the producer is still the newest incarnation of its PID and of its name: an
  incarnation fenced by resume= or by its name must not keep its lease (its successor
  would wait behind it for ever).

  KEYS[1]  the exclusive-producer row (hash)
  KEYS[2]  live shared producers (zset)
  KEYS[3]  idempotence state per PID (hash)
  KEYS[4]  producer names and PID fences (hash)
  KEYS[5]  the partition metadata (hash)
  ARGV[1]  session   the producer's session id
  ARGV[2]  mode      'x' (exclusive holder) or 's' (shared producer)
  ARGV[3]  epoch     the epoch the producer holds or registered under
  ARGV[4]  ttl_ms    lease length (> 0)
  ARGV[5]  inc       the row incarnation the producer saw
  ARGV[6]  pid       the producer's PID
  ARGV[7]  pid_gen   the producer's PID generation on this partition
  ARGV[8]  name      the producer's name ('' if unnamed)
  ARGV[9]  part_inc  the partition incarnation the producer saw (G9: a handle opened before
                     a FLUSHALL must not keep a row alive on the recreated topic)

  Returns {expires, lapsed_ms}: the new lease expiry (ms, server time), 0 for a shared
  producer that is not registered any more (closed, or cleaned up after its lease lapsed);
  lapsed_ms, how long the lease had already ended by server time (0 if it had not).
  Errors: PRODUCER_FENCED (the epoch moved, or another session holds it, or a newer
    incarnation of the PID or the name exists), STATE_LOST, WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "pid_state"
--- @include "pid_fence"

local row_key, shared, pids, names, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local session, mode, epoch = ARGV[1], ARGV[2], int_arg(ARGV[3])
local ttl_ms, inc = int_arg(ARGV[4]), ARGV[5]
local pid, pid_gen, name = ARGV[6], int_arg(ARGV[7]), ARGV[8]
if ttl_ms == nil or ttl_ms <= 0 or epoch == nil or pid_gen == nil then
  return fail(E.BAD_ARGUMENT, 'ttl_ms/epoch/pid_gen', ARGV[4] .. '/' .. ARGV[3] .. '/' .. ARGV[7])
end
local bad = check_types({shared}, {'zset'})
if bad then return bad end
local _
local pid_settings, lost = partition_pid_settings(meta, ARGV[9])
if not pid_settings then return lost end
_, bad = check_standing(row_key, session, mode, epoch, inc)
if bad then return bad end
_, bad = check_name(names, name, pid, pid_gen)
if bad then return bad end
do
  local raw
  raw, bad = read_checked('HGET', pids, pid)
  if bad then return bad end
  local state = raw and decode_pid(raw)
  if not state then
    -- No state (expired, or nothing sent yet): the fence, which never expires, decides.
    _, bad = check_fence(names, pid, pid_gen)
    if bad then return bad end
  end
  -- The owner decides (a resolve of this producer may have bumped the generation while
  -- this renewal was on its way); states without one fall back to the generation.
  if state and (foreign_owner(state, session) or (state.o == '' and state.g > pid_gen)) then
    return fail(E.PRODUCER_FENCED, pid_gen, state.g, 'pid-generation')
  end
end
local now = now_ms()
local expires = now + ttl_ms
local ended
if mode == 'x' then
  ended = redis.call('HGET', row_key, 'expires')
  redis.call('HSET', row_key, 'expires', expires)
else
  ended = redis.call('ZSCORE', shared, session)
  if ended == false then
    -- Not registered any more (closed, or its lapsed lease was cleaned up): a renewal never
    -- re-registers, so it cannot race a close(). Sends still work while the epoch holds.
    return {0, 0}
  end
  redis.call('ZADD', shared, expires, session)
end
ended = tonumber(ended) or 0
return {expires, (ended > 0 and now > ended) and (now - ended) or 0}
