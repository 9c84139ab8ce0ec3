--[[
  append: append a batch of records to one partition, all or nothing, exactly once
  (G2, G3, G4, G5, G6, G9).

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  KEYS[3]  the exclusive-producer row (hash)   <ns>:{<topic>/<p>}:own:__producer__
  KEYS[4]  idempotence state per PID (hash)    <ns>:{<topic>/<p>}:pids
  KEYS[5]  PID -> last write (zset)            <ns>:{<topic>/<p>}:pidexp
  KEYS[6]  producer names (hash)               <ns>:{<topic>/<p>}:names
  ARGV[1]  inc        the partition incarnation the caller saw
  ARGV[2]  seen_next  the highest next offset the caller saw (0 if none)
  ARGV[3]  expected   '' for no check, else the offset the batch must start at
  ARGV[4]  producer   producer id written with each record
  ARGV[5]  epoch      the epoch the producer holds ('x') or registered under ('s')
  ARGV[6]  session    the producer's session id
  ARGV[7]  mode       'x' exclusive holder, 's' shared producer
  ARGV[8]  ttl_ms     an exclusive holder's lease is extended to now + ttl_ms
  ARGV[9]  row_inc    the incarnation of the producer row the producer saw
  ARGV[10] pid_gen    the producer's PID generation on this partition
  ARGV[11] first_seq  sequence of the first record ('' for a non-idempotent producer)
  ARGV[12] checksum   checksum of the batch's records (with the PID and range: its identity)
  ARGV[13] name       the producer's name ('' if unnamed)
  ARGV[14] layout     one character per record: '0' value, '1' value+key, '2' value+headers,
                      '3' value+key+headers
  ARGV[15..] the records' values, keys and headers, in layout order

  Producer state expires after the partition's own expiry (pidexp in its metadata), never an
  argument: a caller's settings cannot expire other producers' state.

  Returns {first_offset, timestamp_ms, start, duplicate, written_epoch}: the batch holds
    offsets first_offset .. first_offset + #layout - 1; start is the first retained offset
    after retention; duplicate is 1 when this exact batch had landed before (nothing written,
    the offsets are the original ones, and written_epoch the epoch it was written in, -1 if
    trimmed away; else written_epoch is the caller's epoch).
  Errors: STATE_LOST (G9: the partition or the producer row vanished, was recreated or went
    backwards; or another producer object owns this PID at the same generation: the
    producer-id counter went backwards), PRODUCER_FENCED (G2: another epoch was granted since, or a newer incarnation
    of this PID or name exists), DUPLICATE_SEQUENCE / OUT_OF_ORDER_SEQUENCE /
    UNKNOWN_PRODUCER_ID (G5: no state for a PID at a generation above 0 that neither its
    fence nor its name vouches for), OFFSET_MISMATCH (expected is not the next offset),
    WRONG_TYPE, BAD_ARGUMENT.

  Checks, in order and before the first write: coordination state (G9), producer session
  and epoch (G2), PID generation, sequence range and checksum (G5), expected offset (G3). An exclusive holder whose lease lapsed while nobody
  else was granted still appends (and its lease is extended): the epoch did not move, as in
  PIP-68 when the old producer reconnects first. Each record is one XADD with the explicit ID
  0-(offset+1), so the stream itself refuses to reuse an offset. (The stream's own G9 check,
  a TYPE call, is made only when a reply is due or by the first XADD: which check fails
  first, and so which error a call gets, is as this order says.)
]]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "idempotence"

local meta, stream, row_key, pids, pid_expiry, names = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6]
local expected, producer, session, mode = ARGV[3], ARGV[4], ARGV[6], ARGV[7]
local row_inc, first_seq, checksum = ARGV[9], ARGV[11], ARGV[12]
local name, layout = ARGV[13], ARGV[14]
-- The integer arguments, as int_arg takes them (decimal digits, at most 17 characters,
-- within +-MAX_INT), in one match when each has at most 15 characters (so within MAX_INT),
-- else one by one through int_arg: C calls are most of what an append costs.
local epoch, ttl_ms, pid_gen, first_s, seen_next = string.match(
  ARGV[5] .. ' ' .. ARGV[8] .. ' ' .. ARGV[10] .. ' ' .. first_seq .. ' ' .. ARGV[2],
  '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d*) (%-?%d+)$')
if epoch and #epoch <= 15 and #ttl_ms <= 15 and #pid_gen <= 15 and #first_s <= 15
    and #seen_next <= 15 then
  epoch, ttl_ms, pid_gen, seen_next = epoch + 0, ttl_ms + 0, pid_gen + 0, seen_next + 0
  first_s = first_s ~= '' and first_s + 0 or nil
else
  epoch, ttl_ms, pid_gen, seen_next = int_arg(ARGV[5]), int_arg(ARGV[8]), int_arg(ARGV[10]),
    int_arg(ARGV[2])
  first_s = first_seq ~= '' and int_arg(first_seq) or nil
end
if epoch == nil or ttl_ms == nil or ttl_ms <= 0 or pid_gen == nil or pid_gen < 0 then
  return fail(E.BAD_ARGUMENT, 'epoch/ttl_ms/pid_gen', ARGV[5] .. '/' .. ARGV[8] .. '/' .. ARGV[10])
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
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[2])
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
-- G5: PID generation, then the sequence range and checksum.
local now = now_ms()
local name_vouches
name_vouches, bad = check_name(names, name, producer, pid_gen)
if bad then return stream_lost(stream, next_offset) or bad end
-- The PID's state: as stored (raw, nil for none), its generation g, last sequence s, last
-- refresh of the expiry index x and window position w (see include/idempotence.lua).
local raw, g, s, x, w
local new_state = false
if first_s ~= nil then
  local expiry_ms = (v[5] or DEFAULT_PID_EXPIRY_MS) + 0
  local o, _t
  raw, g, s, _t, x, o, w = read_pid(pids, producer, now, expiry_ms)
  if raw == false then return stream_lost(stream, next_offset) or g end
  if raw == nil or now - x >= EXPIRY_INDEX_MS then
    -- The expiry index is written below (a new state, or a stale index entry).
    bad = check_expiry_index(pid_expiry)
    if bad then return stream_lost(stream, next_offset) or bad end
  end
  if raw ~= nil then
    -- Never take another incarnation's or another producer object's batches for ours.
    bad = check_owner(g, o, producer, pid_gen, session)
    if bad then return stream_lost(stream, next_offset) or bad end
    if first_s ~= s + 1 then
      bad = stream_lost(stream, next_offset)
      if bad then return bad end
      -- Only a batch at or below the last sequence can be in the window (a resend).
      if first_s <= s then
        local seen = find_batch({win = string.sub(raw, w)}, first_s, last_s)
        if seen == nil then
          return fail(E.DUPLICATE_SEQUENCE, producer, first_s, last_s, 'older-than-window')
        end
        if seen[3] ~= checksum then
          return fail(E.DUPLICATE_SEQUENCE, producer, first_s, last_s, 'other-records')
        end
        -- The epoch it was written in (a resumed incarnation resends under a newer one);
        -- -1 once retention trimmed it away.
        local id = offset_id(seen[4])
        local entry = redis.call('XRANGE', stream, id, id)[1]
        local written = -1
        if entry then
          for i = 1, #entry[2], 2 do
            if entry[2][i] == 'e' then
              written = entry[2][i + 1]
            end
          end
        end
        return {seen[4], now, (v[3] or 0) + 0, 1, written}
      end
      return fail(E.OUT_OF_ORDER_SEQUENCE, producer, s + 1, first_s)
    end
  else
    -- No state: a first batch, or an idle producer whose state expired (it starts afresh,
    -- KIP-360), judged by the PID's fence, which does not expire: an incarnation fenced by
    -- resume= never starts over below its fence once its state is gone.
    bad = check_fresh_start(names, producer, pid_gen, name_vouches)
    if bad then return stream_lost(stream, next_offset) or bad end
    new_state, x = true, 0
  end
end

-- G3: the expected offset.
if expected ~= '' and int_arg(expected) == nil then
  return stream_lost(stream, next_offset) or fail(E.BAD_ARGUMENT, 'expected', expected)
end
if expected ~= '' and tonumber(expected) ~= next_offset then
  return stream_lost(stream, next_offset) or fail(E.OFFSET_MISMATCH, expected, next_offset)
end
local start
start, bad = append_records(meta, stream, next_offset, (v[3] or 0) + 0, (v[4] or 0) + 0,
  layout, 1, n, 15, string.format('%d', now), ARGV[5], producer, true)
if bad then return bad end
if mode == 'x' then
  -- A send extends the holder's lease: a lapsed holder that nobody replaced keeps its
  -- epoch (PIP-68), and a holder's lease always runs a full ttl past its last write.
  redis.call('HSET', row_key, 'expires', string.format('%d', now + ttl_ms))
end
if first_s ~= nil then
  if new_state then
    -- A new registration removes a few expired states of other producers (a write, so
    -- only now that every check passed).
    drop_expired(pids, pid_expiry, now, (v[5] or DEFAULT_PID_EXPIRY_MS) + 0)
  end
  -- The state now belongs to this incarnation and producer object.
  save_batch(pids, pid_expiry, producer, now, pid_gen, session, x, raw, w, first_s, last_s,
    checksum, next_offset)
end
return {next_offset, now, start, 0, epoch}
