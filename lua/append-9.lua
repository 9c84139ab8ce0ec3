--[[
  append: append a batch of records to one partition, all or nothing, exactly once
  (G2, G3, G4, G5, G6, G9).

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  KEYS[3]  the exclusive-producer row (hash)   <ns>:{<topic>/<p>}:own:__producer__
  KEYS[4]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[5]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  KEYS[6]  producer names (hash)               <ns>:{<topic>/<p>}:names
  KEYS[7]  the duplicate window (hash)         <ns>:{<topic>/<p>}:win
  KEYS[8]  message ids (hash)                  <ns>:{<topic>/<p>}:mids
  KEYS[9]  message ids, oldest first (list)    <ns>:{<topic>/<p>}:midq
  ARGV[1]  inc        the partition incarnation the caller saw
  ARGV[2]  header     the short arguments, separated by one space each, in this order:
             seen_next  the highest next offset the caller saw (0 if none)
             epoch      the epoch the producer holds ('x') or registered under ('s')
             ttl_ms     an exclusive holder's lease is extended to now + ttl_ms
             pid_gen    the producer's PID generation on this partition
             first_seq  sequence of the first record ('' for a non-idempotent producer)
             fresh      '1' when the producer knows no copy of this batch was ever sent
                        before (the first attempt of sequences past all it had seen
                        written), else '0': only such a batch may start a PID's state
                        afresh, so a resend is never taken for a fresh start
             expected   '' for no check, else the offset the batch must start at
             mode       'x' exclusive holder, 's' shared producer
             producer   producer id written with each record
             name       the producer's name ('' if unnamed)
           (one argument instead of ten: each argument costs the server more than a
           capture of the one match that splits them)
  ARGV[3]  session    the producer's session id
  ARGV[4]  row_inc    the incarnation of the producer row the producer saw
  ARGV[5]  digest     a digest of the batch's records, 96 bits (with the PID and range: its
                      identity; a changed resend cannot match it by chance)
  ARGV[6]  layout     one character per record: '0' value, '1' value+key, '2' value+headers,
                      '3' value+key+headers; '4' to '7' the same with a message id; with
                      ids, then '|' and the record count of each caller's call, comma-
                      separated (see include/message_ids.lua)
  ARGV[7..] the records' values, keys, headers and ids, in layout order

  Producer state expires after the partition's own expiry (pidexp in its metadata), and the
  duplicate window is the partition's own size (dedupw), and the message id window its own
  count and age (midw, midttl), never arguments: a caller's settings cannot change other
  producers' guarantees.

  Returns "<first_offset> <timestamp_ms> <start> <duplicate> <written_epoch>[ <answers>]"
    (one string: a table reply costs the server more than the rest of a check): the batch's
    records hold offsets first_offset onwards, in order; start is the first retained offset
    after retention; duplicate is 1 when this exact batch had landed before (nothing written,
    the offsets are the original ones, and written_epoch the epoch it was written in, -1 if
    trimmed away; else written_epoch is the caller's epoch). answers, when a caller's call
    was answered by its message ids, names those records and their originals,
    "i:offset:epoch,..." (i from 0): they were not written, and the others took the offsets
    from first_offset on.
  Errors: STATE_LOST (G9: the partition or the producer row vanished, was recreated or went
    backwards; or another producer object owns this PID at the same generation: the
    producer-id counter went backwards), PRODUCER_FENCED (G2: another epoch was granted
    since, or a newer incarnation of this PID or name exists), DUPLICATE_SEQUENCE (G5: a
    resend that cannot be answered from the window, with the reason 'straddles',
    'other-records' or 'older-than-window': see judge_resend), OUT_OF_ORDER_SEQUENCE,
    UNKNOWN_PRODUCER_ID (G5: no live state, and the batch is not fresh ('expired': it may
    be a resend, and only a resolve can tell), or the PID is at a generation above 0 that
    neither its fence nor its name vouches for; or, reason 'idle', none for an unnamed PID
    at generation 0 past its first batch: the producer takes a fresh PID),
    DUPLICATE_MESSAGE_ID (a caller's call whose message ids are partly known: its known
    records, "i:offset:epoch,..."; nothing written), OFFSET_MISMATCH (expected is not the
    next offset),
    WRONG_TYPE, BAD_ARGUMENT (also for a header that does not split into its ten fields).

  Checks, in order and before the first write: coordination state (G9), producer session
  and epoch (G2), PID generation, sequence range and digest (G5), message ids, expected
  offset (G3: a call answered by its ids is answered whatever its expected offset). An
  exclusive holder whose lease lapsed while nobody else was granted still appends (and its
  lease is extended): the epoch did not move, as in PIP-68 when the old producer
  reconnects first. Each record is one XADD with the explicit ID 0-(offset+1), so the
  stream itself refuses to reuse an offset. (The stream's own G9 check, a TYPE call, is
  made only when a reply is due or by the first XADD: which check fails first, and so
  which error a call gets, is as this order says.)

  Two paths: the fast path (include/append_fast.lua) takes the common send and returns;
  anything else falls through to the general path below, which runs every check from the
  start, so every error, and every answer but the fast path's one, is the general path's.
]]

--- @include "append_fast"

--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "pid_state"
--- @include "pid_fence"
--- @include "resend"
--- @include "message_ids"

local meta, stream, row_key, pids, pid_expiry, names, win = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local mids, midq = KEYS[8], KEYS[9]
local a_seen_next, a_epoch, a_ttl_ms, a_pid_gen, first_seq, fresh, expected, mode, producer,
  name = string.match(ARGV[2],
    '^(%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*)$')
if a_seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'header', ARGV[2])
end
local session, row_inc, digest = ARGV[3], ARGV[4], ARGV[5]
-- The records' shapes, and with message ids the sizes of the callers' calls.
local layout, units = split_layout(ARGV[6])
local at, sizes
if units then
  at = id_positions(layout, 7)
  sizes = at and unit_sizes(units, #layout)
  if sizes == nil then
    return fail(E.BAD_ARGUMENT, 'layout', ARGV[6])
  end
end
-- The integer arguments: decimal digits, at most 17 characters, within +-MAX_INT (int_arg).
local epoch, ttl_ms, pid_gen, seen_next = int_arg(a_epoch), int_arg(a_ttl_ms),
  int_arg(a_pid_gen), int_arg(a_seen_next)
local first_s = first_seq ~= '' and int_arg(first_seq) or nil
if fresh ~= '0' and fresh ~= '1' then
  return fail(E.BAD_ARGUMENT, 'fresh', fresh)
end
if epoch == nil or ttl_ms == nil or ttl_ms <= 0 or pid_gen == nil or pid_gen < 0 then
  return fail(E.BAD_ARGUMENT, 'epoch/ttl_ms/pid_gen',
    a_epoch .. '/' .. a_ttl_ms .. '/' .. a_pid_gen)
end
local n = #layout
if n == 0 then
  return fail(E.BAD_ARGUMENT, 'layout', 'empty')
end
local last_s
if first_seq ~= '' then
  if first_s == nil or first_s < 0 then
    return fail(E.BAD_ARGUMENT, 'first_seq', first_seq)
  end
  last_s = first_s + n - 1
end
if seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'seen_next', a_seen_next)
end
-- G9: the partition is the one the caller saw. Its stream's own check (stream_lost, a TYPE
-- call) comes with the first write instead (append_records), or before any other reply:
-- the order of the checks, and so which error a call gets, is as listed above.
local v, next_offset = check_partition(meta, ARGV[1], seen_next)
if not v then return next_offset end
local bad
-- G2: the producer still stands in its epoch.
local _
_, bad = check_standing(row_key, session, mode, epoch, row_inc)
if bad then return stream_lost(stream, next_offset) or bad end
-- G5: PID generation, then the sequence range and digest.
local now = now_ms()
local name_vouches
name_vouches, bad = check_name(names, name, producer, pid_gen)
if bad then return stream_lost(stream, next_offset) or bad end
-- The PID's state as stored, live or expired (raw nil for none): its generation g, last
-- sequence s, last write t, last refresh of the expiry index x, owner o and the number of
-- batches b its window recorded (see include/pid_state.lua).
local raw, g, s, t, x, o, b
local window = (v[6] or DEFAULT_DEDUP_WINDOW) + 0
local new_state = false
if first_s ~= nil then
  local expiry_ms = (v[5] or DEFAULT_PID_EXPIRY_MS) + 0
  raw, g, s, t, x, o, b = stored_pid(pids, producer)
  if raw == false then return stream_lost(stream, next_offset) or g end
  local live = raw ~= nil and t >= now - expiry_ms
  -- The window is read or written below, whatever the case.
  bad = check_type_or_none(win, 'hash')
  if bad then return stream_lost(stream, next_offset) or bad end
  if raw ~= nil and live then
    -- Never take another incarnation's or another producer object's batches for ours.
    bad = check_owner(g, o, producer, pid_gen, session)
    if bad then return stream_lost(stream, next_offset) or bad end
  end
  if raw ~= nil and first_s <= s then
    -- Sequences this PID wrote before: a resend, answered from the window or refused -
    -- never written again, also once the state expired (it is judged while stored).
    bad = stream_lost(stream, next_offset)
    if bad then return bad end
    local seen
    seen, bad = judge_resend(win, producer, b, window, s, first_s, last_s, digest)
    if bad then return bad end
    -- The epoch it was written in (a resumed incarnation resends under a newer one), and
    -- the records its call had answered by their message ids.
    return string.format('%d %d %d 1 %s', seen[4], now, (v[3] or 0) + 0,
      written_epoch(stream, seen[4])) .. (seen[5] ~= '' and ' ' .. seen[5] or '')
  end
  if raw == nil or not live or now - x >= EXPIRY_INDEX_MS then
    -- The expiry index is written below (a new state, or a stale index entry).
    bad = check_type_or_none(pid_expiry, 'zset')
    if bad then return stream_lost(stream, next_offset) or bad end
  end
  if live then
    if first_s ~= s + 1 then
      return stream_lost(stream, next_offset)
        or fail(E.OUT_OF_ORDER_SEQUENCE, producer, s + 1, first_s)
    end
  else
    -- No live state: a first batch, or a producer whose state expired. Only a batch the
    -- producer knows was never sent before may start afresh: a resend whose state expired
    -- during its retries may have landed, and only a resolve can tell.
    if fresh ~= '1' then
      return stream_lost(stream, next_offset) or fail(E.UNKNOWN_PRODUCER_ID, producer, 'expired')
    end
    -- Judged by the PID's fence, which does not expire: an incarnation fenced by resume=
    -- never starts over below its fence once its state is gone.
    bad = check_fresh_start(names, producer, pid_gen, name_vouches)
    if bad then return stream_lost(stream, next_offset) or bad end
    if first_s > 0 and pid_gen == 0 and name == '' then
      -- A plain producer past its first batch whose state expired while it was idle: it
      -- takes a fresh PID and sends this batch again as that PID's first (KIP-360), so a
      -- PID's sequences always start at 0 and state saved before the expiry stays
      -- unresumable (UNKNOWN_PRODUCER_ID), as it would be had it stayed idle.
      return stream_lost(stream, next_offset) or fail(E.UNKNOWN_PRODUCER_ID, producer, 'idle')
    end
    new_state = true
  end
end

-- Message ids: each caller's call answered (every id known), refused (some known) or
-- written (none known).
local answered, written, id_window, id_ttl = nil, n, 0, 0
if units then
  local w = redis.call('HMGET', meta, 'midw', 'midttl')
  id_window = (w[1] or DEFAULT_MESSAGE_ID_WINDOW) + 0
  id_ttl = (w[2] or DEFAULT_MESSAGE_ID_TTL_MS) + 0
  bad = check_types({mids, midq}, {'hash', 'list'})
  if bad then return stream_lost(stream, next_offset) or bad end
  local partial
  answered, written, partial = judge_units(mids, at, sizes, n, next_offset, a_epoch, now, id_ttl)
  if partial then
    return stream_lost(stream, next_offset) or fail(E.DUPLICATE_MESSAGE_ID, partial)
  end
end
-- G3: the expected offset (of a call that writes).
if written > 0 and expected ~= '' and int_arg(expected) == nil then
  return stream_lost(stream, next_offset) or fail(E.BAD_ARGUMENT, 'expected', expected)
end
if written > 0 and expected ~= '' and tonumber(expected) ~= next_offset then
  return stream_lost(stream, next_offset) or fail(E.OFFSET_MISMATCH, expected, next_offset)
end
local start = (v[3] or 0) + 0
local ts = string.format('%d', now)
local answers = ''
if written == n then
  start, bad = append_records(meta, stream, next_offset, start, (v[4] or 0) + 0, layout, 1, n, 7,
    ts, a_epoch, producer, true)
  if bad then return bad end
else
  bad = stream_lost(stream, next_offset)
  if bad then return bad end
  answers = answers_of(answered, n)
  -- The records of the calls that write, in runs between those answered, at the next
  -- offsets in order.
  local pos, offset, i = 7, next_offset, 1
  local first_part = {}
  for j = 1, n do
    first_part[j] = pos
    local shape = string.byte(layout, j) - 48
    pos = pos + 1 + shape % 2 + math.floor(shape / 2) % 2 + (shape >= 4 and 1 or 0)
  end
  while i <= n do
    if answered[i] then
      i = i + 1
    else
      local j = i
      while j < n and not answered[j + 1] do
        j = j + 1
      end
      start, bad = append_records(meta, stream, offset, start, (v[4] or 0) + 0, layout, i, j,
        first_part[i], ts, a_epoch, producer, false)
      if bad then return bad end
      offset = offset + j - i + 1
      i = j + 1
    end
  end
end
if units and written > 0 then
  remember_ids(mids, midq, at, answered, next_offset, n, a_epoch, ts, now, id_window, id_ttl)
end
if mode == 'x' then
  -- A send extends the holder's lease: a lapsed holder that nobody replaced keeps its
  -- epoch (PIP-68), and a holder's lease always runs a full ttl past its last write.
  redis.call('HSET', row_key, 'expires', string.format('%d', now + ttl_ms))
end
if first_s ~= nil then
  if new_state then
    -- A new registration removes a few expired states of other producers (a write, so
    -- only now that every check passed), and the window of this PID's own expired state.
    drop_expired(pids, pid_expiry, win, names, now, (v[5] or DEFAULT_PID_EXPIRY_MS) + 0, window)
    if raw ~= nil then
      drop_window(win, producer, b, window)
    end
    x, b = 0, 0
    -- The PID's fence records that it wrote here, and outlives its state: resuming a
    -- saved state of it once that state is gone is refused (pid_open), as a resend could
    -- then not be told from new records.
    if pid_fence(names, producer) < pid_gen then
      set_pid_fence(names, producer, pid_gen)
    end
  end
  -- The state now belongs to this incarnation and producer object.
  save_batch(pids, pid_expiry, win, producer, now, pid_gen, session, x, b, window, first_s,
    last_s, digest, next_offset, answers)
end
return string.format('%d %d %d 0 %d', next_offset, now, start, epoch)
  .. (answers ~= '' and ' ' .. answers or '')
