--[[
  append: append a batch of records to one partition, all or nothing (G3, G4, G6, G9).

  KEYS[1]  the partition metadata (hash)       <ns>:{<topic>/<p>}:part
  KEYS[2]  the partition's stream              <ns>:{<topic>/<p>}:log
  ARGV[1]  inc        the partition incarnation the caller saw
  ARGV[2]  seen_next  the highest next offset the caller saw (0 if none)
  ARGV[3]  expected   '' for no check, else the offset the batch must start at
  ARGV[4]  producer   producer id written with each record ('' for none)
  ARGV[5]  epoch      epoch written with each record
  ARGV[6]  layout     one character per record: '0' value, '1' value+key, '2' value+headers,
                      '3' value+key+headers
  ARGV[7..] the records' values, keys and headers, in layout order

  Returns {first_offset, timestamp_ms, start}: the batch holds offsets first_offset ..
    first_offset + #layout - 1; start is the first retained offset after retention.
  Errors: STATE_LOST (G9: the partition vanished, was recreated or went backwards),
    OFFSET_MISMATCH (expected is not the next offset), WRONG_TYPE, BAD_ARGUMENT.

  Every check happens before the first write. Each record is one XADD with the explicit ID
  0-(offset+1), so the stream itself refuses to reuse an offset.
]]
--- @include "common"
--- @include "partition"

local meta, stream = KEYS[1], KEYS[2]
local expected, producer, epoch, layout = ARGV[3], ARGV[4], ARGV[5], ARGV[6]

local seen_next = int_arg(ARGV[2])
if seen_next == nil then
  return fail(E.BAD_ARGUMENT, 'seen_next', ARGV[2])
end
local p, bad = load_partition(meta, stream, ARGV[1], seen_next)
if bad then return bad end
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
local pos = 7
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
return {first, now, start}
