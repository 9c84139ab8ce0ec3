--[[
  trim: retention. Drop the records before an offset; offsets of the rest never change (G6).

  KEYS[1]  the partition metadata (hash)
  KEYS[2]  the partition's stream
  ARGV[1]  inc            the partition incarnation the caller saw
  ARGV[2]  before_offset  records with offsets below this are removed (<= next offset)

  Returns {start, next}: the first retained offset and the next offset after trimming.
  Errors: STATE_LOST, OFFSET_OUT_OF_RANGE (before_offset past the next offset), WRONG_TYPE.
]]
--- @include "common"
--- @include "partition"

local meta, stream = KEYS[1], KEYS[2]
local before = int_arg(ARGV[2])

local p, bad = load_partition(meta, stream, ARGV[1], 0)
if bad then return bad end
if before == nil or before < 0 or before > p.next then
  return fail(E.OFFSET_OUT_OF_RANGE, ARGV[2], p.start, p.next)
end
if before > p.start then
  if p.next > 0 then
    redis.call('XTRIM', stream, 'MINID', offset_id(before))
  end
  redis.call('HSET', meta, 'start', before)
  p.start = before
end
return {p.start, p.next}
