--[[
  Reading a partition's metadata and the G9 checks of every call on a partition, and
  appending records to its stream.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  Partition fields: inc (incarnation), topic_inc, next (next offset), start (first retained
  offset), maxlen (0: unlimited), pidexp (producer state expiry in ms) and dedupw (the
  duplicate window of idempotent producers, in batches), both copied from the topic when the
  partition was created (absent in older partitions: 7 days, 5 batches). The stream entry of
  offset o has the ID 0-(o+1).
]]
--- @include "common"

-- The G9 checks of every call on a partition but the stream's own (stream_lost): the
-- metadata is there, of the incarnation the caller saw (seen_inc), and has not gone back
-- below the highest next offset it saw (seen_next). Returns the fields as stored ({inc,
-- next, start, maxlen, pidexp, dedupw}, false when absent) and the next offset; or nil and
-- an error reply.
local function check_partition(meta, seen_inc, seen_next)
  local v, bad = read_checked('HMGET', meta, 'inc', 'next', 'start', 'maxlen', 'pidexp',
    'dedupw')
  if bad then
    return nil, bad
  end
  bad = check_incarnation(v[1], seen_inc)
  if bad then
    return nil, bad
  end
  local next_offset = (v[2] or 0) + 0
  if next_offset < seen_next then
    return nil, fail(E.STATE_LOST, 'offset', seen_next, next_offset)
  end
  return v, next_offset
end

-- A partition whose topic is being deleted (topic_delete marked its metadata) takes no new
-- user: no producer, waiter or incarnation opens, no Spark batch begins. Users already
-- there go on until the delete refuses (the topic is in use) or removes the metadata.
-- Returns nil, or an error reply.
local function refuse_deleting(meta)
  if redis.call('HEXISTS', meta, 'deleting') == 1 then
    return fail(E.TOPIC_DELETING, meta)
  end
  return nil
end

-- The producer state expiry and duplicate window of a partition, from its metadata (KEYS
-- of the caller), checked against the partition incarnation the caller saw (G9). Returns
-- expiry_ms, window, or nil and an error reply.
local function partition_pid_settings(meta, seen_inc)
  local v, bad = read_checked('HMGET', meta, 'inc', 'pidexp', 'dedupw')
  if bad then
    return nil, bad
  end
  bad = check_incarnation(v[1], seen_inc)
  if bad then
    return nil, bad
  end
  return tonumber(v[2] or DEFAULT_PID_EXPIRY_MS), tonumber(v[3] or DEFAULT_DEDUP_WINDOW)
end

-- The last G9 check of a partition: its stream is a stream, or missing while nothing was
-- ever appended (trimming keeps an empty stream). Returns nil, or an error reply.
local function stream_lost(stream, next_offset)
  local st = key_type(stream)
  if st ~= 'stream' then
    if st ~= 'none' then
      return fail(E.WRONG_TYPE, st, stream)
    end
    if next_offset > 0 then
      return fail(E.STATE_LOST, 'stream', next_offset, '-')
    end
  end
  return nil
end

-- Returns the partition as a table, or nil plus an error reply.
-- seen_inc: the incarnation the caller saw; seen_next: the highest next offset it saw.
local function load_partition(meta, stream, seen_inc, seen_next)
  local v, next_offset = check_partition(meta, seen_inc, seen_next)
  if not v then
    return nil, next_offset
  end
  local bad = stream_lost(stream, next_offset)
  if bad then
    return nil, bad
  end
  return {
    inc = v[1],
    next = next_offset,
    start = tonumber(v[3] or '0'),
    maxlen = tonumber(v[4] or '0'),
    pidexp = tonumber(v[5] or DEFAULT_PID_EXPIRY_MS),
  }
end

-- The stream ID of an offset.
local function offset_id(offset)
  return string.format('0-%d', offset + 1)
end

-- XADD ... with NOMKSTREAM after the key, through redis.pcall (see append_records).
local function xadd_existing(command, key, ...)
  return redis.pcall(command, key, 'NOMKSTREAM', ...)
end

-- Append records from_i .. to_i of a batch (their parts start at ARGV[pos], in layout
-- order; the shapes include/message_ids.lua tells) at offsets first, first + 1, ..., one
-- XADD with an explicit ID each, then apply retention (maxlen, 0: unlimited; start: the
-- first retained offset so far) and store the new next offset. ts and ep are strings: a Lua
-- number would be formatted again for every record. Returns the first retained offset.
-- unchecked: the caller left stream_lost out (it costs a TYPE call) because nothing failed
-- since: the first XADD makes that check, before anything is written (NOMKSTREAM: a stream
-- that vanished is not created anew), and this returns nil and its error reply.
local function append_records(meta, stream, first, start, maxlen, layout, from_i, to_i, pos,
    ts, ep, producer, unchecked)
  local call = redis.call
  if unchecked then
    if first == 0 then
      -- Nothing appended yet: a missing stream is fine, only another type is not.
      local bad = stream_lost(stream, first)
      if bad then
        return nil, bad
      end
    else
      call = xadd_existing
    end
  end
  local i = from_i
  while i <= to_i do
    local shape = string.byte(layout, i) - 48
    local id = string.format('0-%d', first + i - from_i + 1)
    local value, reply, at = ARGV[pos], nil, pos
    if shape == 0 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value)
      pos = pos + 1
    elseif shape == 1 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos + 1])
      pos = pos + 2
    elseif shape == 2 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'h', ARGV[pos + 1])
      pos = pos + 2
    elseif shape == 3 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos + 1], 'h', ARGV[pos + 2])
      pos = pos + 3
    -- Shapes 4..7: as 0..3, with the record's message id as its last part (field m).
    elseif shape == 4 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'm', ARGV[pos + 1])
      pos = pos + 2
    elseif shape == 5 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos + 1], 'm', ARGV[pos + 2])
      pos = pos + 3
    elseif shape == 6 then
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'h', ARGV[pos + 1], 'm', ARGV[pos + 2])
      pos = pos + 3
    else
      reply = call('XADD', stream, id, 't', ts, 'e', ep, 'p', producer, 'v', value,
        'k', ARGV[pos + 1], 'h', ARGV[pos + 2], 'm', ARGV[pos + 3])
      pos = pos + 4
    end
    i = i + 1
    if call ~= redis.call then
      call = redis.call
      if type(reply) ~= 'string' then
        -- Nothing written: no stream (NOMKSTREAM), or an error.
        local bad = stream_lost(stream, first)
        if bad then
          return nil, bad
        end
        -- Another error: this record again through redis.call, which raises it.
        i = i - 1
        pos = at
      end
    end
  end
  local next_offset = first + to_i - from_i + 1
  if maxlen > 0 and next_offset - start > maxlen then
    start = next_offset - maxlen
    redis.call('XTRIM', stream, 'MINID', offset_id(start))
  end
  -- string.format: cheaper than Lua's own formatting of a number argument (same digits).
  redis.call('HSET', meta, 'next', string.format('%d', next_offset), 'start',
    string.format('%d', start))
  return start
end

-- append_records at the partition's next offsets (p as load_partition returns it).
local function write_records(meta, stream, p, layout, from_i, to_i, pos, ts, ep, producer)
  return append_records(meta, stream, p.next, p.start, p.maxlen, layout, from_i, to_i, pos, ts,
    ep, producer)
end
