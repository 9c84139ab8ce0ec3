--[[
  producer_open: register a producer on one partition in an access mode (SHARED,
  EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING).

  KEYS[1]  the exclusive-producer row (hash)   <ns>:{<t>/<p>}:own:__producer__
  KEYS[2]  live shared producers (zset)        <ns>:{<t>/<p>}:prod:shared
  KEYS[3]  the waiter queue (zset)             <ns>:{<t>/<p>}:prod:waiters
  KEYS[4]  the waiters' leases (hash)          <ns>:{<t>/<p>}:prod:waitexp
  KEYS[5]  the partition metadata (hash)       <ns>:{<t>/<p>}:part
  ARGV[1]  session     the producer's session id
  ARGV[2]  label       the producer's name, for people and logs
  ARGV[3]  mode        'shared' | 'exclusive' | 'wait' | 'fence' | 'term'
  ARGV[4]  ttl_ms      lease length (> 0)
  ARGV[5]  new_inc     incarnation to store if the row is created now
  ARGV[6]  seen_inc    row incarnation the producer saw ('' if none)
  ARGV[7]  my_wgen     for 'wait': the wgen it first queued under ('' on its first call)
  ARGV[8]  session_ch  prefix of the severed holder's channel, <ns>:{<t>/<p>}:session:
                       (this partition's hash tag: published in this slot); the session id
                       is appended
  ARGV[9]  released_ch channel waiters listen on, in this slot (<row key>:released)
  ARGV[10] named       '1' if ARGV[2] is the producer's name: a live exclusive holder of the
                       same name is an older incarnation and is taken over at once
  ARGV[11] part_inc    the partition incarnation the producer saw (G9: a topic handle
                       opened before a FLUSHALL must not take a row on the recreated topic)
  ARGV[12] election    for 'term': the election whose term opens ('' otherwise)
  ARGV[13] token       for 'term': the term's token, which becomes the epoch

  Returns one of
    {'granted', epoch, expires_ms, inc, wgen}   exclusive now (epoch = token, grown by one)
    {'shared', epoch, expires_ms, inc, wgen}    registered as a shared producer
    {'waiting', remaining_ms, position, inc, wgen}  queued (wait mode): try again after
                                                remaining_ms or a message on released_ch
  Errors: PRODUCER_BUSY (reason 'exclusive' | 'shared' | 'waiting'), PRODUCER_FENCED (a
    waiter fenced by EXCLUSIVE_WITH_FENCING; reason 'term-ended': a later term of the
    election fenced the partition), GUARDED (reason 'outside': an election guards the
    partition and this open is not its term's; 'election': another election guards it;
    'epoch': producers outside the election wrote it at epochs up to the term's token),
    TOPIC_DELETING, STATE_LOST, WRONG_TYPE, BAD_ARGUMENT.
  Notifies (last; sharded pub/sub where the server has it): a severed exclusive holder on
    session_ch .. <its session> ("severed <old epoch> <new epoch> <row key>"), and waiters
    on released_ch after EXCLUSIVE_WITH_FENCING ("fenced <epoch>").

  Rules: SHARED is refused while a live exclusive holder or a live waiter exists, and its
  first registration after an exclusive regime bumps the epoch. EXCLUSIVE is refused while
  any other live producer exists (holder, shared, waiter), else epoch + 1. WAIT queues in
  FIFO order (each waiter holds its own lease: a dead one is skipped once it lapses) and is
  granted as EXCLUSIVE when it is the first live waiter and nobody else lives.
  EXCLUSIVE_WITH_FENCING ('fence') always wins: epoch + 1, the holder, every shared producer
  and every waiter are fenced.
  A partition guarded by an election (guard.lua) takes only 'term' opens of that election:
  granted while its epoch is below the token, or equal to it (the same term: a second
  producer of the term takes over); the epoch becomes the token, and everyone else
  registered there is fenced. Lower tokens never fence higher ones.
]]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "producer_queue"
--- @include "guard"

local row_key, shared, waiters, leases, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local session, label, mode = ARGV[1], ARGV[2], ARGV[3]
local ttl_ms = int_arg(ARGV[4])
local new_inc, seen_inc, my_wgen = ARGV[5], ARGV[6], ARGV[7]
local session_ch, released_ch, named = ARGV[8], ARGV[9], ARGV[10]
local election, term_token = ARGV[12] or '', int_arg(ARGV[13] or '0')

if ttl_ms == nil or ttl_ms <= 0 then
  return fail(E.BAD_ARGUMENT, 'ttl_ms', ARGV[4])
end
if mode == 'term' and (election == '' or term_token == nil or term_token < 1) then
  return fail(E.BAD_ARGUMENT, 'term', election .. ' ' .. tostring(ARGV[13]))
end
local bad = check_types({shared, waiters, leases}, {'zset', 'zset', 'hash'})
if bad then return bad end
local _
local pid_settings, lost = partition_pid_settings(meta, ARGV[11])
if not pid_settings then return lost end
bad = refuse_deleting(meta)
if bad then return bad end
local row
row, bad = load_producer_row(row_key, new_inc)
if bad then return bad end
if seen_inc ~= '' then
  bad = check_incarnation(row.exists and row.inc, seen_inc)
  if bad then return bad end
end
local guard = row.exists and guard_of(row_key) or ''
if mode == 'term' then
  if guard ~= '' and guard ~= election then
    return fail(E.GUARDED, guard, 'election', row.token)
  end
  if row.token > term_token or (row.token == term_token and guard == '') then
    if guard == election then
      return fail(E.PRODUCER_FENCED, term_token, row.token, 'term-ended')
    end
    return fail(E.GUARDED, election, 'epoch', row.token)
  end
  if row.token == term_token and row.session == session and row.mode == 'x' then
    -- A retry of this open: same epoch, lease extended.
    row.expires = now_ms() + ttl_ms
    save_producer_row(row_key, row)
    return {'granted', row.token, row.expires, row.inc, row.wgen}
  end
  fence_partition(row, row_key, shared, waiters, leases, election, term_token, session_ch,
    released_ch)
  row.token = term_token
  row.gen = row.gen + 1
  row.session = session
  row.label = label
  row.expires = now_ms() + ttl_ms
  save_producer_row(row_key, row)
  return {'granted', row.token, row.expires, row.inc, row.wgen}
end
if guard ~= '' then
  return fail(E.GUARDED, guard, 'outside', row.token)
end
if mode == 'wait' and my_wgen ~= '' and tonumber(my_wgen) < row.wgen then
  return fail(E.PRODUCER_FENCED, row.token, row.token, 'fenced-waiter')
end

local now = now_ms()
-- A retry of a call that already made this session the holder (or a waiter an operator's
-- release handed the partition to, producer_evict): same epoch, lease extended.
if mode ~= 'shared' and row.mode == 'x' and row.session == session then
  row.expires = now + ttl_ms
  row.label = label
  row.pname = named == '1' and label or ''
  save_producer_row(row_key, row)
  return {'granted', row.token, row.expires, row.inc, row.wgen}
end
local holder_live = row.mode == 'x' and row.session ~= '' and row.expires > now
  and row.session ~= session
if holder_live and mode ~= 'shared' and named == '1' and row.pname == label then
  holder_live = false  -- our own older incarnation: a named restart takes over (epoch + 1)
end
local shared_expiry = live_shared(shared, now)
local head, head_expiry = head_waiter(waiters, leases, now)

-- A new exclusive grant to this session: epoch + 1, the previous holder is told.
local function grant()
  local severed = row.session
  row.token = row.token + 1
  row.gen = row.gen + 1
  row.session = session
  row.label = label
  row.pname = named == '1' and label or ''
  row.expires = now + ttl_ms
  row.mode = 'x'
  save_producer_row(row_key, row)
  if severed ~= '' and severed ~= session then
    notify_severed(session_ch, severed, row.token - 1, row.token, row_key)
  end
  return {'granted', row.token, row.expires, row.inc, row.wgen}
end

if mode == 'shared' then
  if holder_live then
    return fail(E.PRODUCER_BUSY, 'exclusive', row.expires - now, row.label)
  end
  if head ~= nil then
    return fail(E.PRODUCER_BUSY, 'waiting', head_expiry - now, '')
  end
  if row.mode ~= 's' then
    local severed = row.session
    if row.token > 0 then
      row.token = row.token + 1
    end
    row.mode = 's'
    row.session = ''
    row.expires = 0
    save_producer_row(row_key, row)
    if severed ~= '' then
      notify_severed(session_ch, severed, row.token - 1, row.token, row_key)
    end
  elseif not row.exists then
    save_producer_row(row_key, row)
  end
  redis.call('ZADD', shared, now + ttl_ms, session)
  return {'shared', row.token, now + ttl_ms, row.inc, row.wgen}
end

if mode == 'exclusive' then
  if holder_live then
    return fail(E.PRODUCER_BUSY, 'exclusive', row.expires - now, row.label)
  end
  if shared_expiry ~= nil then
    return fail(E.PRODUCER_BUSY, 'shared', shared_expiry - now, '')
  end
  if head ~= nil then
    return fail(E.PRODUCER_BUSY, 'waiting', head_expiry - now, '')
  end
  return grant()
end

if mode == 'fence' then
  row.wgen = row.wgen + 1
  redis.call('DEL', shared, waiters, leases)
  local reply = grant()
  notify(released_ch, 'fenced ' .. row.token)
  return reply
end

if mode ~= 'wait' then
  return fail(E.BAD_ARGUMENT, 'mode', mode)
end

-- WAIT_FOR_EXCLUSIVE: join (or stay in) the queue with a fresh lease.
if redis.call('ZSCORE', waiters, session) == false then
  row.wseq = row.wseq + 1
  redis.call('ZADD', waiters, row.wseq, session)
  if head == nil then
    head, head_expiry = session, now + ttl_ms
  end
end
redis.call('HSET', leases, session, now + ttl_ms)
if head == session and not holder_live and shared_expiry == nil then
  redis.call('ZREM', waiters, session)
  redis.call('HDEL', leases, session)
  return grant()
end
save_producer_row(row_key, row)
local remaining
if holder_live then
  remaining = row.expires - now
elseif shared_expiry ~= nil then
  remaining = shared_expiry - now
else
  remaining = head_expiry - now
end
local position = redis.call('ZRANK', waiters, session)
return {'waiting', remaining, position, row.inc, row.wgen}
