--[[
  sink_append: the Spark sink appends one chunk of a Spark partition's rows to one topic
  partition, exactly once across task retries, executor loss and query restarts (G2, G6,
  G9).

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  KEYS[3]  the exclusive-producer row (hash)   <ns>:{<topic>/<p>}:own:__producer__
  KEYS[4]  the sink state of the app (hash)    <ns>:{<topic>/<p>}:sink:<app>
  KEYS[5]  message ids (hash)                  <ns>:{<topic>/<p>}:mids
  KEYS[6]  message ids, oldest first (list)    <ns>:{<topic>/<p>}:midq
  ARGV[1]  inc        the partition incarnation the caller saw
  ARGV[2]  seen_next  the highest next offset the caller saw (0 if none)
  ARGV[3]  producer   producer id written with each record (the executor's shared producer)
  ARGV[4]  epoch      the epoch the shared producer registered under
  ARGV[5]  session    the shared producer's session
  ARGV[6]  row_inc    the incarnation of the producer row the producer saw
  ARGV[7]  query      the streaming query id
  ARGV[8]  batch      the micro-batch id
  ARGV[9]  npart      the batch's Spark partition count (0: not known to the tasks, which
                      the data source sink's tasks are not told)
  ARGV[10] spark_part the Spark partition the rows come from
  ARGV[11] prev_idx   index (within the Spark partition) of the row routed here just before
                      the chunk, -1 if none
  ARGV[12] prev_hash  the chain hash at prev_idx ('' if none)
  ARGV[13] indexes    the rows' indexes within the Spark partition, ascending, space-separated
  ARGV[14] hashes     the chain hash after each row, 16 hex characters each, concatenated
  ARGV[15] layout     one character per record, as in append ('0'..'3'; '4'..'7' with a
                      message id as the record's last part; no unit sizes: each row is a
                      unit of its own)
  ARGV[16..] the records' values, keys, headers and ids, in layout order

  The rows of one Spark partition routed here form a chain: each row's hash covers its index,
  its bytes and the hash before it. The state keeps the highest index written (hw) and the
  chain hash there (hh). Rows at or below hw were written by an earlier attempt and are
  skipped; the rest are appended - after checking that the chunk's chain passes through
  (hw, hh), so an attempt whose rows differ from the first one's (another partitioning or
  order: a batch that is not deterministic) is refused instead of writing a duplicate.
  Rows past hw that carry a message id already appended to the partition within its id
  window (by any writer: another lineage of the app after a lost checkpoint) are skipped
  one by one, and the others written; the ids written are remembered as append remembers
  them.

  Returns {first_offset, written, skipped, timestamp_ms}: the records written hold offsets
    first_offset .. first_offset + written - 1, in chunk order (first_offset is -1 when
    written is 0); skipped counts the rows written before (by index or by message id).
  Errors: SINK_MISMATCH (the chain does not pass through the stored state), SINK_STALE (the
    batch is not the one the driver began here), STATE_LOST, PRODUCER_FENCED, WRONG_TYPE,
    BAD_ARGUMENT.
]]
--- @include "common"
--- @include "partition"
--- @include "producer"
--- @include "sink"
--- @include "message_ids"

local meta, stream, row_key, key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mids, midq = KEYS[5], KEYS[6]
local producer, epoch, session, row_inc = ARGV[3], int_arg(ARGV[4]), ARGV[5], ARGV[6]
local query, batch, npart = ARGV[7], int_arg(ARGV[8]), int_arg(ARGV[9])
local spark_part, prev_idx, prev_hash = ARGV[10], int_arg(ARGV[11]), ARGV[12]
local hashes, layout = ARGV[14], ARGV[15]
local n = #layout
local idx = {}
for token in string.gmatch(ARGV[13], '%S+') do
  idx[#idx + 1] = int_arg(token)
end
if epoch == nil or batch == nil or npart == nil or prev_idx == nil or n == 0
    or #idx ~= n or #hashes ~= 16 * n then
  return fail(E.BAD_ARGUMENT, 'sink chunk', ARGV[8] .. '/' .. ARGV[10] .. '/' .. n)
end
local sp = int_arg(spark_part)
if sp == nil or sp < 0 or (npart > 0 and sp >= npart) then
  return fail(E.BAD_ARGUMENT, 'spark_part', spark_part)
end
-- Every record's parts are present: 1 to 4 per record by its shape, nothing more.
local at = id_positions(layout, 16)
if at == nil then
  return fail(E.BAD_ARGUMENT, 'layout', layout)
end
local parts = 0
for i = 1, n do
  parts = parts + record_parts(string.byte(layout, i) - 48)
end
if parts ~= #ARGV - 15 then
  return fail(E.BAD_ARGUMENT, 'parts', parts .. '/' .. (#ARGV - 15))
end
local last = prev_idx
for i = 1, n do
  if idx[i] == nil or idx[i] <= last then
    return fail(E.BAD_ARGUMENT, 'indexes', ARGV[13])
  end
  last = idx[i]
end
local seen_next = int_arg(ARGV[2])
if seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[2])
end
-- G9: the partition is the one the caller saw.
local p, bad = load_partition(meta, stream, ARGV[1], seen_next)
if bad then return bad end
-- G2: the shared producer still stands in its epoch.
local _
_, bad = check_standing(row_key, session, 's', epoch, row_inc)
if bad then return bad end
local s
s, bad = load_sink(key)
if bad then return bad end
local now = now_ms()
if s.q ~= query or s.n ~= npart or (s.b ~= batch and s.c ~= batch) then
  return fail(E.SINK_STALE, s.q or '-', s.b, batch)
end
if s.c == batch then
  -- The driver marked the batch finished: a late attempt of one of its tasks.
  return {-1, 0, n, now}
end
local field = 's' .. spark_part
local raw = redis.call('HGET', key, field)
local hw, hh = -1, ''
if raw then
  local a, b = string.match(raw, '^(%-?%d+) (%x*)$')
  hw, hh = tonumber(a), b
end
if idx[n] < hw then
  -- Written before, whole, by an attempt that went further: checked when a later chunk
  -- reaches hw.
  return {-1, 0, n, now}
end
-- j: the last position (0 = the row before the chunk) at or below hw.
local j = 0
for i = 1, n do
  if idx[i] <= hw then j = i else break end
end
local at_idx = prev_idx
local at_hash = prev_hash
if j > 0 then
  at_idx = idx[j]
  at_hash = string.sub(hashes, 16 * j - 15, 16 * j)
end
if at_idx ~= hw or at_hash ~= hh then
  return fail(E.SINK_MISMATCH, spark_part, hw, at_idx)
end
if j == n then
  return {-1, 0, n, now}
end

-- Rows j+1 .. n are past hw: each one whose message id is known is skipped on its own.
local skip = {}
for i = 1, j do
  skip[i] = true
end
local id_window, id_ttl, with_ids = 0, 0, false
for i = j + 1, n do
  if at[i] then with_ids = true end
end
if with_ids then
  local w = redis.call('HMGET', meta, 'midw', 'midttl')
  id_window = (w[1] or DEFAULT_MESSAGE_ID_WINDOW) + 0
  id_ttl = (w[2] or DEFAULT_MESSAGE_ID_TTL_MS) + 0
  bad = check_types({mids, midq}, {'hash', 'list'})
  if bad then return bad end
  local fields, index = {}, {}
  for i = j + 1, n do
    if at[i] then
      fields[#fields + 1] = ARGV[at[i]]
      index[#index + 1] = i
    end
  end
  local spread = unpack or table.unpack
  local values = redis.call('HMGET', mids, spread(fields))
  local in_chunk = {}
  for k = 1, #index do
    local raw, id = values[k], fields[k]
    if raw then
      local t = string.match(raw, '^%d+ %-?%d+ (%d+)$')
      if t and t + id_ttl > now then
        skip[index[k]] = true
      end
    end
    if in_chunk[id] then
      skip[index[k]] = true
    end
    in_chunk[id] = true
  end
end

-- Write the rows not skipped, run by run, in chunk order.
local first = p.next
local ts = string.format('%d', now)
local written, pos, i = 0, 16, 1
while i <= n do
  if skip[i] then
    pos = pos + record_parts(string.byte(layout, i) - 48)
    i = i + 1
  else
    local from, from_pos = i, pos
    while i <= n and not skip[i] do
      pos = pos + record_parts(string.byte(layout, i) - 48)
      i = i + 1
    end
    p.start = write_records(meta, stream, p, layout, from, i - 1, from_pos, ts, ARGV[4],
      producer)
    p.next = p.next + i - from
    written = written + i - from
  end
end
if with_ids and written > 0 then
  remember_ids(mids, midq, at, skip, first, n, ARGV[4], ts, now, id_window, id_ttl)
end
redis.call('HSET', key, field, idx[n] .. ' ' .. string.sub(hashes, 16 * n - 15, 16 * n))
return {written > 0 and first or -1, written, n - written, now}
