--[[
  Reading a partition's metadata and the G9 checks of every call on a partition.
  Needs common.lua.

  Partition fields: inc (incarnation), topic_inc, next (next offset), start (first retained
  offset), maxlen (0: unlimited), pidexp (producer state expiry in ms, copied from the topic
  when the partition was created; absent in older partitions: 7 days). The stream entry of offset o has the ID 0-(o+1).
]]

-- Returns the partition as a table, or nil plus an error reply.
-- seen_inc: the incarnation the caller saw; seen_next: the highest next offset it saw.
local function load_partition(meta, stream, seen_inc, seen_next)
  local v, bad = read_checked('HMGET', meta, 'inc', 'next', 'start', 'maxlen', 'pidexp')
  if bad then
    return nil, bad
  end
  if not v[1] then
    return nil, fail(E.STATE_LOST, 'missing', seen_inc, '-')
  end
  local p = {
    inc = v[1] or '',
    next = tonumber(v[2] or '0'),
    start = tonumber(v[3] or '0'),
    maxlen = tonumber(v[4] or '0'),
    pidexp = tonumber(v[5] or DEFAULT_PID_EXPIRY_MS),
  }
  if p.inc ~= seen_inc then
    return nil, fail(E.STATE_LOST, 'incarnation', seen_inc, p.inc)
  end
  if p.next < seen_next then
    return nil, fail(E.STATE_LOST, 'offset', seen_next, p.next)
  end
  local st = key_type(stream)
  if st ~= 'stream' then
    if st ~= 'none' then
      return nil, fail(E.WRONG_TYPE, st, stream)
    end
    if p.next > 0 then
      -- Records were appended, so the stream must exist (trimming keeps an empty stream).
      return nil, fail(E.STATE_LOST, 'stream', p.next, '-')
    end
  end
  return p
end

-- The stream ID of an offset.
local function offset_id(offset)
  return string.format('0-%d', offset + 1)
end

-- Append records from_i .. to_i of a batch (their parts start at ARGV[pos], in layout
-- order) at the partition's next offsets, one XADD with an explicit ID each, then apply
-- retention and store the new next offset. Returns the first retained offset.
local function write_records(meta, stream, p, layout, from_i, to_i, pos, ts, ep, producer)
  local first = p.next
  for i = from_i, to_i do
    local shape = string.byte(layout, i) - 48
    local id = offset_id(first + i - from_i)
    local value = ARGV[pos]
    pos = pos + 1
    if shape == 0 then
      redis.call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value)
    elseif shape == 1 then
      redis.call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos])
      pos = pos + 1
    elseif shape == 2 then
      redis.call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'h', ARGV[pos])
      pos = pos + 1
    else
      redis.call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos], 'h', ARGV[pos + 1])
      pos = pos + 2
    end
  end
  local next_offset = first + to_i - from_i + 1
  local start = p.start
  if p.maxlen > 0 and next_offset - start > p.maxlen then
    start = next_offset - p.maxlen
    redis.call('XTRIM', stream, 'MINID', offset_id(start))
  end
  redis.call('HSET', meta, 'next', next_offset, 'start', start)
  return start
end
