--[[
  producer_evict: an operator's release of one partition's producers (fencing release
  --producer). Whoever writes the partition is severed with epoch + 1: the exclusive holder
  (live, or lapsed and still able to renew) and every shared producer. The partition then
  goes to the queue in order: the first live WAIT_FOR_EXCLUSIVE waiter is made the exclusive
  holder at that epoch here, atomically (its next open attempt, woken by the message on
  released_ch, finds itself granted), so nobody can slip in between. With evict_waiters the
  waiters are fenced too (Pulsar's evict-all) and the partition is left free.
  Nothing changes on a partition where nobody is registered.

  KEYS[1]  the exclusive-producer row (hash)   <ns>:{<t>/<p>}:own:__producer__
  KEYS[2]  live shared producers (zset)        <ns>:{<t>/<p>}:prod:shared
  KEYS[3]  the waiter queue (zset)             <ns>:{<t>/<p>}:prod:waiters
  KEYS[4]  the waiters' leases (hash)          <ns>:{<t>/<p>}:prod:waitexp
  KEYS[5]  the partition metadata (hash)       <ns>:{<t>/<p>}:part
  ARGV[1]  part_inc       the partition incarnation the operator saw
  ARGV[2]  session_ch     prefix of a severed holder's channel (<ns>:{<t>/<p>}:session:)
  ARGV[3]  released_ch    channel waiters listen on (<row key>:released)
  ARGV[4]  evict_waiters  '1' fences the waiters too, '0' hands the partition to the first

  Returns {old_epoch, new_epoch, severed_session, severed_label, next_session, shared,
    waiters_fenced}: severed_session is the exclusive holder severed ('' if none),
    next_session the waiter that now holds the partition ('' if none), shared the number of
    shared producers fenced, waiters_fenced the number of live waiters fenced.
  Errors: GUARDED (reason 'outside': an election guards the partition; end its term with
    fencing release __election__ NAME), TOPIC_DELETING, STATE_LOST, WRONG_TYPE.
  Notifies (last; sharded pub/sub where the server has it): the severed holder on
    session_ch .. <its session> ("severed <old epoch> <new epoch> <row key>"); waiters on
    released_ch ("handed <epoch>", or "fenced <epoch>" when evicted).
]]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "producer_queue"
--- @include "guard"

local row_key, shared, waiters, leases, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local session_ch, released_ch, evict = ARGV[2], ARGV[3], ARGV[4] == '1'

local bad = check_types({shared, waiters, leases}, {'zset', 'zset', 'hash'})
if bad then return bad end
local _
local pid_settings, lost = partition_pid_settings(meta, ARGV[1])
if not pid_settings then return lost end
bad = refuse_deleting(meta)
if bad then return bad end
local row
row, bad = load_producer_row(row_key, '')
if bad then return bad end
if not row.exists then
  return {0, 0, '', '', '', 0, 0}
end
local guard = guard_of(row_key)
if guard ~= '' then
  return fail(E.GUARDED, guard, 'outside', row.token)
end

local now = now_ms()
local old_token = row.token
local holder = row.mode == 'x' and row.session or ''
local holder_label = holder ~= '' and row.label or ''
local shared_n = 0
if live_shared(shared, now) ~= nil then
  shared_n = redis.call('ZCOUNT', shared, '(' .. now, '+inf')
end
local head, head_expiry = head_waiter(waiters, leases, now)
local waiting = 0
if head ~= nil then
  waiting = redis.call('ZCARD', waiters)
end
if holder == '' and shared_n == 0 and head == nil then
  return {old_token, old_token, '', '', '', 0, 0}
end

row.token = row.token + 1
row.gen = row.gen + 1
local next_session = ''
if evict then
  row.wgen = row.wgen + 1
  redis.call('DEL', shared, waiters, leases)
elseif head ~= nil then
  redis.call('DEL', shared)
  redis.call('ZREM', waiters, head)
  redis.call('HDEL', leases, head)
  waiting = 0
  next_session = head
else
  redis.call('DEL', shared)
end
if next_session ~= '' then
  -- The waiter's own open fills in its label and lease when it wakes.
  row.session, row.label, row.pname = next_session, '', ''
  row.expires, row.mode = head_expiry, 'x'
else
  row.session, row.label, row.pname, row.expires = '', '', '', 0
  if holder ~= '' then
    row.mode = 'x'
  end
end
save_producer_row(row_key, row)
if holder ~= '' then
  notify_severed(session_ch, holder, old_token, row.token, row_key)
end
if evict then
  notify(released_ch, 'fenced ' .. row.token)
else
  notify(released_ch, 'handed ' .. row.token)
end
return {old_token, row.token, holder, holder_label, next_session, shared_n, waiting}
