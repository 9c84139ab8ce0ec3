--[[
  Application message ids on one partition: a record whose id was appended to the partition
  within its id window (by count and by age, judged by server time) is not appended again;
  its caller is answered with the original's offset and epoch. The unit is the caller's
  call (a unit of the batch): every id of it known, it is answered; some known, it is
  refused whole (DUPLICATE_MESSAGE_ID); none known, it is written.

  Functions only: no KEYS of their own (callers pass the keys they work on); they read the
  records' ids from ARGV at the positions id_positions gives. Each says what it returns.

  ids   (hash) "<id>" -> "<offset> <epoch> <ms>": where the id's record landed, and when
  queue (list) "<ms> <offset> <id>", oldest first: the order in which ids are forgotten,
        once more than the window's count are kept or once older than its age. An entry
        forgets its id only if the hash still names that offset (an id appended again
        after it aged out has a newer entry further on).
  The partition metadata holds the window: midw (count) and midttl (age, ms), fixed when
  the topic was created (absent in older partitions: 10,000 ids and one hour).

  A layout argument is "<shapes>" without ids, "<shapes>|<unit sizes>" with them: one
  shape character per record ('0'..'7': bit 1 a key, bit 2 headers, bit 4 an id, whose part
  comes last), then the record count of each caller's call, comma-separated, in order.

  The append's fast path (append_fast.lua) does what judge_units and remember_ids do for one
  caller's call whose ids are all new, inline: a change here is a change there
  (tests/topics/test_append_paths.py holds the two to the same replies and writes).
]]
--- @include "common"

-- Entries past their age removed per call at most (beyond the ones the count pushes out):
-- bounded work per script; the count bounds the memory whatever the age does.
local MAX_ID_EXPIRE = 32

-- The shapes and unit sizes of a layout argument (units nil when it holds no ids).
local function split_layout(arg)
  local bar = string.find(arg, '|', 1, true)
  if not bar then
    return arg, nil
  end
  return string.sub(arg, 1, bar - 1), string.sub(arg, bar + 1)
end

-- The ARGV position of each record's id ({[i] = pos}, none for a record without one), the
-- records' parts starting at ARGV[pos] in layout order. Returns nil for a bad shape.
local function id_positions(shapes, pos)
  local at = {}
  for i = 1, #shapes do
    local shape = string.byte(shapes, i) - 48
    if shape < 0 or shape > 7 then
      return nil
    end
    local parts = 1 + shape % 2 + math.floor(shape / 2) % 2
    if shape >= 4 then
      at[i] = pos + parts
      parts = parts + 1
    end
    pos = pos + parts
  end
  return at
end

-- The unit sizes of a units argument, checked to add up to n records. Returns the list, or
-- nil.
local function unit_sizes(units, n)
  local sizes, total = {}, 0
  for size in string.gmatch(units, '[^,]+') do
    local k = int_arg(size)
    if k == nil or k < 1 then
      return nil
    end
    sizes[#sizes + 1] = k
    total = total + k
  end
  if total ~= n then
    return nil
  end
  return sizes
end

-- Judges each unit of a batch of n records appended at next_offset under epoch: its ids
-- looked up in the hash (an entry past ttl_ms by server time is not known), or in an
-- earlier unit of the same call that is written (the same id twice in one call of group
-- commit: the later caller is answered by the earlier one's record).
-- Returns answered ({[i] = 'offset:epoch'} for each record of a unit whose every id is
-- known), the number of records written, and nil; or nil, nil and the partly known records
-- as "i:offset:epoch,..." (i from 0); or nil, nil, nil and an error reply.
local function judge_units(ids, at, sizes, n, next_offset, epoch, now, ttl_ms)
  local fields, index = {}, {}
  for i = 1, n do
    if at[i] then
      fields[#fields + 1] = ARGV[at[i]]
      index[#index + 1] = i
    end
  end
  local known = {}
  if #fields > 0 then
    local spread = unpack or table.unpack
    local values, bad = read_checked('HMGET', ids, spread(fields))
    if bad then
      return nil, nil, nil, bad
    end
    for j = 1, #index do
      local raw = values[j]
      if raw then
        local o, e, t = string.match(raw, '^(%d+) (%-?%d+) (%d+)$')
        if o and t + ttl_ms > now then
          known[index[j]] = o .. ':' .. e
        end
      end
    end
  end
  local answered, partial, written, from = {}, nil, 0, 1
  local in_call = {}
  for _, size in ipairs(sizes) do
    local to = from + size - 1
    local k = 0
    for i = from, to do
      local id = at[i] and ARGV[at[i]]
      if not known[i] and id and in_call[id] then
        known[i] = in_call[id]
      end
      if known[i] then
        k = k + 1
      end
    end
    if k == size then
      for i = from, to do
        answered[i] = known[i]
      end
    elseif k > 0 then
      partial = partial or {}
      for i = from, to do
        if known[i] then
          partial[#partial + 1] = string.format('%d:', i - 1) .. known[i]
        end
      end
    else
      for i = from, to do
        if at[i] then
          in_call[ARGV[at[i]]] = string.format('%d:', next_offset + written + i - from) .. epoch
        end
      end
      written = written + size
    end
    from = to + 1
  end
  if partial then
    return nil, nil, table.concat(partial, ',')
  end
  return answered, written, nil
end

-- The answered records as "i:offset:epoch,..." (i from 0), '' for none.
local function answers_of(answered, n)
  local out = {}
  for i = 1, n do
    if answered[i] then
      out[#out + 1] = string.format('%d:', i - 1) .. answered[i]
    end
  end
  return table.concat(out, ',')
end

-- Remembers the ids of the records written (those not answered, at next_offset onwards in
-- order), then forgets the oldest beyond the window's count, and a few past its age.
local function remember_ids(ids, queue, at, answered, next_offset, n, ep, ts, now, window,
    ttl_ms)
  local spread = unpack or table.unpack
  local fields, entries, nf, ne = {}, {}, 0, 0
  local tail, offset = ' ' .. ep .. ' ' .. ts, next_offset
  for i = 1, n do
    if not answered[i] then
      local p = at[i]
      if p then
        local id, o = ARGV[p], string.format('%d', offset)
        fields[nf + 1], fields[nf + 2], nf = id, o .. tail, nf + 2
        ne = ne + 1
        entries[ne] = ts .. ' ' .. o .. ' ' .. id
      end
      offset = offset + 1
    end
  end
  if ne == 0 then
    return
  end
  redis.call('HSET', ids, spread(fields))
  local len = redis.call('RPUSH', queue, spread(entries))
  local old = {}
  if len > window then
    old = redis.call('LPOP', queue, len - window)
  end
  local head = redis.call('LINDEX', queue, 0)
  local t = head and string.match(head, '^(%d+) ')
  if t and t + ttl_ms <= now then
    local aged = redis.call('LRANGE', queue, 0, MAX_ID_EXPIRE - 1)
    local k = 0
    for _, entry in ipairs(aged) do
      local et = string.match(entry, '^(%d+) ')
      if et == nil or et + ttl_ms > now then
        break
      end
      k = k + 1
      old[#old + 1] = entry
    end
    redis.call('LTRIM', queue, k, -1)
  end
  if #old == 0 then
    return
  end
  local names, prefixes = {}, {}
  for j, entry in ipairs(old) do
    local o, id = string.match(entry, '^%d+ (%d+) (.*)$')
    names[j], prefixes[j] = id or '', (o or '-') .. ' '
  end
  -- An entry forgets its id only while the hash names its offset (see above).
  local current = redis.call('HMGET', ids, spread(names))
  local gone, ng = {}, 0
  for j = 1, #names do
    local raw = current[j]
    if raw and string.find(raw, prefixes[j], 1, true) == 1 then
      ng = ng + 1
      gone[ng] = names[j]
    end
  end
  if ng > 0 then
    redis.call('HDEL', ids, spread(gone))
  end
end
