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
  ARGV[2]  header     the short arguments, separated by one space each, in this order:
             seen_next  the highest next offset the caller saw (0 if none)
             epoch      the epoch the producer holds ('x') or registered under ('s')
             ttl_ms     an exclusive holder's lease is extended to now + ttl_ms
             pid_gen    the producer's PID generation on this partition
             first_seq  sequence of the first record ('' for a non-idempotent producer)
             expected   '' for no check, else the offset the batch must start at
             mode       'x' exclusive holder, 's' shared producer
             producer   producer id written with each record
             name       the producer's name ('' if unnamed)
           (one argument instead of nine: each argument costs the server more than a
           capture of the one match that splits them)
  ARGV[3]  session    the producer's session id
  ARGV[4]  row_inc    the incarnation of the producer row the producer saw
  ARGV[5]  checksum   checksum of the batch's records (with the PID and range: its identity)
  ARGV[6]  layout     one character per record: '0' value, '1' value+key, '2' value+headers,
                      '3' value+key+headers
  ARGV[7..] the records' values, keys and headers, in layout order

  Producer state expires after the partition's own expiry (pidexp in its metadata), never an
  argument: a caller's settings cannot expire other producers' state.

  Returns "<first_offset> <timestamp_ms> <start> <duplicate> <written_epoch>" (one string: a
    table reply costs the server more than the rest of a check): the batch holds
    offsets first_offset .. first_offset + #layout - 1; start is the first retained offset
    after retention; duplicate is 1 when this exact batch had landed before (nothing written,
    the offsets are the original ones, and written_epoch the epoch it was written in, -1 if
    trimmed away; else written_epoch is the caller's epoch).
  Errors: STATE_LOST (G9: the partition or the producer row vanished, was recreated or went
    backwards; or another producer object owns this PID at the same generation: the
    producer-id counter went backwards), PRODUCER_FENCED (G2: another epoch was granted since, or a newer incarnation
    of this PID or name exists), DUPLICATE_SEQUENCE / OUT_OF_ORDER_SEQUENCE /
    UNKNOWN_PRODUCER_ID (G5: no state for a PID at a generation above 0 that neither its
    fence nor its name vouches for; or, reason 'idle', none for an unnamed PID at generation
    0 past its first batch: the producer takes a fresh PID), OFFSET_MISMATCH (expected is not the next offset),
    WRONG_TYPE, BAD_ARGUMENT (also for a header that does not split into its nine fields).

  Checks, in order and before the first write: coordination state (G9), producer session
  and epoch (G2), PID generation, sequence range and checksum (G5), expected offset (G3). An exclusive holder whose lease lapsed while nobody
  else was granted still appends (and its lease is extended): the epoch did not move, as in
  PIP-68 when the old producer reconnects first. Each record is one XADD with the explicit ID
  0-(offset+1), so the stream itself refuses to reuse an offset. (The stream's own G9 check,
  a TYPE call, is made only when a reply is due or by the first XADD: which check fails
  first, and so which error a call gets, is as this order says.)

  Two paths. The fast path below takes the common send only: a producer that stands, the
  next batch of a live PID state it owns (or a producer that is not idempotent), on a
  partition with records. It reads what the checks need and writes exactly what the general
  path would, with no helper closures (Lua creates one per `local function` on every call),
  no tables of its own and few C calls: it compares strings as stored (the scripts store
  every number as plain decimal digits) instead of converting them. Anything else - any check that
  would fail, a key of another type, a first batch, a duplicate, a stale expiry index entry
  - leaves it before its first write, and the general path after it runs the whole
  sequence from the start, so every error, and every answer but this one, is the general
  path's.
]]

-- [fast path] (bench.script_cost and tests/test_append_paths.py cut the script at these
-- two marker lines)
do
  -- (Locals: a global costs a table lookup at every use.)
  local call, try, KEYS, ARGV = redis.call, redis.pcall, KEYS, ARGV
  local seen_next, epoch, ttl_ms, pid_gen, first_seq, expected, mode, producer, name =
    string.match(ARGV[2], '^(%d+) (%d+) ([1-9]%d*) (%d+) (%d*) (%d*) ([sx]) (%S+) (%S*)$')
  local meta = KEYS[1]
  -- (pidexp is read only for a PID state older than a second: every partition's is at
  -- least 1000 ms, so a younger one is live.)
  local v = try('HMGET', meta, 'inc', 'next', 'start', 'maxlen')
  local next_s, start_s = v[2], v[3]
  -- Each integer argument as the general path takes it (int_arg: at most 15 digits here);
  -- the stored ones are '%d' digits, so equal strings are equal numbers. A partition
  -- without records (next 0) leaves: its stream may be missing (stream_lost).
  if seen_next and v[1] == ARGV[1] and next_s and next_s ~= '0' and start_s
      and #seen_next <= 15 and #epoch <= 15 and #ttl_ms <= 15 and #pid_gen <= 15
      and #first_seq <= 15 and (expected == '' or expected == next_s) then
    local next_offset = next_s + 0
    local session, row_key = ARGV[3], KEYS[3]
    local w
    if mode == 's' then
      w = try('HMGET', row_key, 'inc', 'token', 'mode')
    else
      w = try('HMGET', row_key, 'inc', 'token', 'mode', 'session')
    end
    -- G9 and G2 (check_partition, check_standing).
    local standing = (seen_next == next_s or next_offset >= seen_next + 0) and w[1] == ARGV[4]
      and w[2] == epoch and w[3] == mode and (mode == 's' or w[4] == session)
    if standing and name ~= '' then
      -- check_name: a name nobody holds, or held by this incarnation (the header's producer
      -- holds no space, so check_name's match would split this string the same way).
      local owner = try('HGET', KEYS[6], name)
      standing = owner == false or owner == producer .. ' ' .. pid_gen
    end
    if standing then
      local pids, raw, g, s, tw, x, o, kept = KEYS[4], nil, nil, nil, nil, nil, nil, nil
      if first_seq ~= '' then
        raw = try('HGET', pids, producer)
        if type(raw) == 'string' then
          -- STATE_RE's fields and KEPT_RE's window (include/idempotence.lua), of a state
          -- with a last sequence of 0 or more. A window of 4 entries or more is scanned by
          -- %b|| (a C loop) every other entry: the same match, for less than KEPT_RE's.
          g, s, tw, x, o, kept = string.match(raw,
            '^(%d+) (%d+) (%d+) (%d+) ([^|]*)(%b||[^|]*%b||[^|]*)')
          if g == nil then
            g, s, tw, x, o, kept = string.match(raw,
              '^(%d+) (%d+) (%d+) (%d+) ([^|]*)(|?[^|]*|?[^|]*|?[^|]*|?[^|]*)')
          end
        end
      end
      local t = call('TIME')
      local us = t[2]
      local l = #us
      -- now_ms() as '%d' digits, without a format call.
      local ts = t[1] .. (l == 6 and string.sub(us, 1, 3) or l == 5 and '0' .. string.sub(us, 1, 2)
        or l == 4 and '00' .. string.sub(us, 1, 1) or '000')
      local now = ts + 0
      local first_s = first_seq ~= '' and first_seq + 0
      -- G5: this PID's own live state (check_owner, read_pid), and this batch the next one
      -- (first_seq as '%d' digits: as long as the last sequence, or one digit longer and a
      -- power of ten). The expiry index entry is fresh (else check_expiry_index and a ZADD:
      -- the general path).
      if first_seq == '' or g == pid_gen and o == session and first_s == s + 1
          and (#first_seq == #s or #first_seq == #s + 1 and first_s == 10 ^ #s)
          and now - x < 60000
          and (now - tw < 1000 or tw + 0 >= now - (call('HGET', meta, 'pidexp') or 604800000)) then
        local stream, layout = KEYS[2], ARGV[6]
        local n = #layout
        -- append_records: the first XADD goes through pcall with NOMKSTREAM, so a stream
        -- that is missing or of another type leaves with nothing written.
        local add, pos, i, id, reply = try, 7, 1, nil, nil
        while i <= n do
          local shape = string.byte(layout, i) - 48
          id = string.format('%d', next_offset + i)
          if shape == 0 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos])
            pos = pos + 1
          elseif shape == 1 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1])
            pos = pos + 2
          elseif shape == 2 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'h', ARGV[pos + 1])
            pos = pos + 2
          else
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1], 'h', ARGV[pos + 2])
            pos = pos + 3
          end
          if add == try then
            if type(reply) ~= 'string' then
              break
            end
            add = call
          end
          i = i + 1
        end
        if n > 0 and i > n then
          -- Retention, then the new next offset ('start' is written when it moved only:
          -- the same value as stored otherwise).
          local maxlen = v[4]
          local last = next_offset + n
          maxlen = maxlen ~= '0' and (maxlen or 0) + 0 or 0
          if maxlen > 0 and last - start_s > maxlen then
            local start = last - maxlen
            start_s = string.format('%d', start)
            call('XTRIM', stream, 'MINID', string.format('0-%d', start + 1))
            call('HSET', meta, 'next', id, 'start', start_s)
          else
            call('HSET', meta, 'next', id)
          end
          if mode == 'x' then
            call('HSET', row_key, 'expires', string.format('%d', now + ttl_ms))
          end
          if first_seq ~= '' then
            -- save_batch: the same string, from the stored digits.
            local last_s = n == 1 and first_seq or string.format('%d', first_s + n - 1)
            call('HSET', pids, producer, g .. ' ' .. last_s .. ' ' .. ts .. ' ' .. x .. ' '
              .. session .. '|' .. first_seq .. ' ' .. last_s .. ' ' .. ARGV[5] .. ' ' .. next_s
              .. kept)
          end
          return next_s .. ' ' .. ts .. ' ' .. start_s .. ' 0 ' .. epoch
        end
      end
    end
  end
end

-- [general path]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "idempotence"

local meta, stream, row_key, pids, pid_expiry, names = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6]
local a_seen_next, a_epoch, a_ttl_ms, a_pid_gen, first_seq, expected, mode, producer, name =
  string.match(ARGV[2], '^(%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*) (%S*)$')
if a_seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'header', ARGV[2])
end
local session, row_inc, checksum, layout = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
-- The integer arguments: decimal digits, at most 17 characters, within +-MAX_INT (int_arg).
local epoch, ttl_ms, pid_gen, seen_next = int_arg(a_epoch), int_arg(a_ttl_ms),
  int_arg(a_pid_gen), int_arg(a_seen_next)
local first_s = first_seq ~= '' and int_arg(first_seq) or nil
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
        local win = string.sub(raw, w)
        local seen = find_batch({win = win}, first_s, last_s)
        if seen == nil then
          -- Not a batch of the window: older than all of it, or a range that cuts across
          -- its batches (sequences used by other records). The window is newest first.
          local oldest
          for f in string.gmatch(win, '|(%d+) ') do
            oldest = f
          end
          return fail(E.DUPLICATE_SEQUENCE, producer, first_s, last_s,
            (oldest and first_s >= tonumber(oldest)) and 'other-records' or 'older-than-window')
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
        return string.format('%d %d %d 1 %s', seen[4], now, (v[3] or 0) + 0, written)
      end
      return fail(E.OUT_OF_ORDER_SEQUENCE, producer, s + 1, first_s)
    end
  else
    -- No state: a first batch, or an idle producer whose state expired. Judged by the
    -- PID's fence, which does not expire: an incarnation fenced by resume= never starts
    -- over below its fence once its state is gone.
    bad = check_fresh_start(names, producer, pid_gen, name_vouches)
    if bad then return stream_lost(stream, next_offset) or bad end
    if first_s > 0 and pid_gen == 0 and name == '' then
      -- A plain producer past its first batch whose state expired while it was idle: it
      -- takes a fresh PID and sends this batch again as that PID's first (KIP-360), so a
      -- PID's sequences always start at 0 and state saved before the expiry stays
      -- unresumable (UNKNOWN_PRODUCER_ID), as it would be had it stayed idle.
      return stream_lost(stream, next_offset) or fail(E.UNKNOWN_PRODUCER_ID, producer, 'idle')
    end
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
  layout, 1, n, 7, string.format('%d', now), a_epoch, producer, true)
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
return string.format('%d %d %d 0 %d', next_offset, now, start, epoch)
