--[[
  The Spark sink's state on one partition.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  One hash per (partition, app id), <ns>:{<topic>/<p>}:sink:<app>:
    q   the query id of the app's lineage (stable across restarts from one checkpoint)
    b   the batch id begun last
    n   the Spark partition count of batch b at its first attempt
    c   the last batch id whose write finished ('' none): a replay of it writes nothing
    r   rows batch c wrote to this partition (or found written)
    p   the query id this lineage took over from here (new_lineage), if it did: a query
        that finds its lineage on some partitions and another on others completes its own
        only where the other is the one it took over from
    s<i>  for Spark partition i of batch b: "<hw> <hh>", the highest row index of that
        partition written here and the chain hash of its rows routed here up to it
    o:<source>  the highest source offset whose rows the app's finished batches wrote, for
        the rows that named their source position: <source> is "<namespace>/<topic>/
        <incarnation>/<partition>" of the topic they were read from. A new lineage of the
        app (a lost checkpoint) starts its source after these
    tw, tk  rows the app's finished batches wrote here, and skipped as written before, in all
    w:<session>  a shared producer of a Spark worker whose tasks wrote the app here (its
        PID): `fencing status` tells its entry apart from other shared producers, and the
        finishing of a batch removes it once its lease lapsed (drop_lapsed_writers)
  A new batch drops the previous batch's s<i> fields: Spark begins batch b + 1 only after it
  committed batch b, so b is never replayed. The o: and w: fields and tw, tk outlive batches
  and lineages.
]]
--- @include "common"

local function load_sink(key)
  local v, bad = read_checked('HMGET', key, 'q', 'b', 'n', 'c', 'r', 'p')
  if bad then
    return nil, bad
  end
  return {q = v[1], b = tonumber(v[2] or '-1'), n = tonumber(v[3] or '-1'),
    c = tonumber(v[4] or '-1'), r = tonumber(v[5] or '0'), p = v[6]}
end

-- Task producers whose lease is looked at per call at most (drop_lapsed_writers).
local MAX_WRITERS = 100

-- Drops the batch's fields (everything but the o: and w: fields and tw, tk), before the
-- caller writes the next batch's.
local function clear_sink(key)
  local names = redis.call('HKEYS', key)
  local gone = {}
  for _, name in ipairs(names) do
    local head = string.sub(name, 1, 2)
    if head ~= 'o:' and head ~= 'w:' and name ~= 'tw' and name ~= 'tk' then
      gone[#gone + 1] = name
    end
  end
  if #gone > 0 then
    redis.call('HDEL', key, (unpack or table.unpack)(gone))
  end
end

-- Removes the app's task producers that are gone from the partition's shared producers
-- (closed, or removed there once lapsed) and those whose lease lapsed, with their shared
-- entry: a Spark worker's producer outlives the tasks that used it, and nothing else
-- removes a lapsed one until another producer opens here. At most MAX_WRITERS are looked
-- at. Returns how many were removed.
local function drop_lapsed_writers(key, shared, now)
  local names = redis.call('HKEYS', key)
  local seen, removed = 0, 0
  for _, name in ipairs(names) do
    if seen >= MAX_WRITERS then
      break
    end
    if string.sub(name, 1, 2) == 'w:' then
      seen = seen + 1
      local session = string.sub(name, 3)
      local expires = redis.call('ZSCORE', shared, session)
      if not expires or tonumber(expires) <= now then
        if expires then
          redis.call('ZREM', shared, session)
        end
        redis.call('HDEL', key, name)
        removed = removed + 1
      end
    end
  end
  return removed
end

-- The ARGV parts of a record of a layout shape (its character less 48, '0'..'7'): its
-- value, then a key (bit 1), headers (bit 2) and a message id (bit 4).
local function record_parts(shape)
  return 1 + shape % 2 + math.floor(shape / 2) % 2 + math.floor(shape / 4) % 2
end
