--[[
  Guarded partitions: a partition whose topic an election guards carries the election's
  name in the 'guard' field of its exclusive-producer row, and its epoch is the token of the
  election's terms. Only that election's leaders open producers there (producer_open in
  mode 'term'); a later term fences it at its grant (term_fence).

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.
]]
--- @include "common"
--- @include "producer"

-- The election guarding the partition of this producer row ('' for none).
local function guard_of(row_key)
  return redis.call('HGET', row_key, 'guard') or ''
end

-- Fence everything registered on a partition now (the exclusive holder, the shared
-- producers, the waiters) and mark it guarded by `election` at epoch `token`: the row keeps
-- no holder, in the exclusive regime, so only a producer of a term of at least `token` of
-- that election can be granted it. `row` is load_producer_row's table, saved here.
local function fence_partition(row, row_key, shared, waiters, leases, election, token,
    session_ch, released_ch)
  local severed, old_token = row.session, row.token
  if token > row.token then
    row.token = token
  end
  row.wgen = row.wgen + 1
  row.session = ''
  row.label = ''
  row.pname = ''
  row.expires = 0
  row.mode = 'x'
  redis.call('DEL', shared, waiters, leases)
  save_producer_row(row_key, row)
  redis.call('HSET', row_key, 'guard', election)
  if severed ~= '' then
    notify_severed(session_ch, severed, old_token, row.token, row_key)
  end
  notify(released_ch, 'fenced ' .. row.token)
end
