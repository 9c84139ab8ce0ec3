--[[
  append: append a batch of records to one partition, all or nothing (G3, G4, G6, G9).

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  KEYS[3]  the exclusive-producer row (hash)   <ns>:{<topic>/<p>}:own:__producer__
  ARGV[1]  inc        the partition incarnation the caller saw
  ARGV[2]  seen_next  the highest next offset the caller saw (0 if none)
  ARGV[3]  expected   '' for no check, else the offset the batch must start at
  ARGV[4]  producer   producer id written with each record
  ARGV[5]  epoch      the epoch the producer holds ('x') or registered under ('s')
  ARGV[6]  session    the producer's session id
  ARGV[7]  mode       'x' exclusive holder, 's' shared producer
  ARGV[8]  ttl_ms     an exclusive holder's lease is extended to now + ttl_ms
  ARGV[9]  row_inc    the incarnation of the producer row the producer saw
  ARGV[10] layout     one character per record: '0' value, '1' value+key, '2' value+headers,
                      '3' value+key+headers
  ARGV[11..] the records' values, keys and headers, in layout order

  Returns {first_offset, timestamp_ms, start}: the batch holds offsets first_offset ..
    first_offset + #layout - 1; start is the first retained offset after retention.
  Errors: STATE_LOST (G9: the partition or the producer row vanished, was recreated or went
    backwards), PRODUCER_FENCED (G2: another epoch was granted since), OFFSET_MISMATCH
    (expected is not the next offset), WRONG_TYPE, BAD_ARGUMENT.

  Checks, in order and before the first write: coordination state (G9), producer session
  and epoch (G2), expected offset (G3). An exclusive holder whose lease lapsed while nobody
  else was granted still appends (and its lease is extended): the epoch did not move, as in
  PIP-68 when the old producer reconnects first. Each record is one XADD with the explicit ID
  0-(offset+1), so the stream itself refuses to reuse an offset.
]]
--- @include "common"
--- @include "partition"
--- @include "producer"

local meta, stream, row_key = KEYS[1], KEYS[2], KEYS[3]
local expected, producer, epoch = ARGV[3], ARGV[4], int_arg(ARGV[5])
local session, mode, ttl_ms, row_inc, layout = ARGV[6], ARGV[7], int_arg(ARGV[8]), ARGV[9],
  ARGV[10]
if epoch == nil or ttl_ms == nil or ttl_ms <= 0 then
  return fail(E.BAD_ARGUMENT, 'epoch/ttl_ms', ARGV[5] .. '/' .. ARGV[8])
end

local seen_next = int_arg(ARGV[2])
if seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[2])
end
local p, bad = load_partition(meta, stream, ARGV[1], seen_next)
if bad then return bad end
local row
row, bad = load_producer_row(row_key, '')
if bad then return bad end
if not row.exists then
  return fail(E.STATE_LOST, 'missing', row_inc, '-')
end
if row.inc ~= row_inc then
  return fail(E.STATE_LOST, 'incarnation', row_inc, row.inc)
end
if row.token < epoch then
  return fail(E.STATE_LOST, 'token', epoch, row.token)
end
if mode == 'x' then
  if row.mode ~= 'x' or row.session ~= session or row.token ~= epoch then
    return fail(E.PRODUCER_FENCED, epoch, row.token, 'superseded')
  end
elseif mode ~= 's' or row.mode ~= 's' or row.token ~= epoch then
  return fail(E.PRODUCER_FENCED, epoch, row.token, 'superseded')
end
if expected ~= '' and int_arg(expected) == nil then
  return fail(E.BAD_ARGUMENT, 'expected', expected)
end
if expected ~= '' and tonumber(expected) ~= p.next then
  return fail(E.OFFSET_MISMATCH, expected, p.next)
end
local n = #layout
if n == 0 then
  return fail(E.BAD_ARGUMENT, 'layout', 'empty')
end

local now = now_ms()
local first = p.next
local pos = 11
for i = 1, n do
  local shape = string.byte(layout, i) - 48
  local id = offset_id(first + i - 1)
  local value = ARGV[pos]
  pos = pos + 1
  if shape == 0 then
    redis.call('XADD', stream, id, 't', now, 'e', epoch, 'p', producer, 'v', value)
  elseif shape == 1 then
    redis.call('XADD', stream, id, 't', now, 'e', epoch, 'p', producer, 'v', value,
      'k', ARGV[pos])
    pos = pos + 1
  elseif shape == 2 then
    redis.call('XADD', stream, id, 't', now, 'e', epoch, 'p', producer, 'v', value,
      'h', ARGV[pos])
    pos = pos + 1
  else
    redis.call('XADD', stream, id, 't', now, 'e', epoch, 'p', producer, 'v', value,
      'k', ARGV[pos], 'h', ARGV[pos + 1])
    pos = pos + 2
  end
end

local next_offset = first + n
local start = p.start
if p.maxlen > 0 and next_offset - start > p.maxlen then
  start = next_offset - p.maxlen
  redis.call('XTRIM', stream, 'MINID', offset_id(start))
end
redis.call('HSET', meta, 'next', next_offset, 'start', start)
if mode == 'x' then
  redis.call('HSET', row_key, 'expires', now + ttl_ms)
end
return {first, now, start}
