--[[
  The producer side of a partition (the access modes): its exclusive-producer row, and the
  check of every fenced producer call.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  The exclusive-producer row is the ownership row ("__producer__", "<topic>/<p>") with four
  more fields: mode ('' none yet, 'x' exclusive regime, 's' shared regime), wgen (bumped by
  EXCLUSIVE_WITH_FENCING: waiters registered under an older wgen are fenced), wseq (the
  waiters' arrival counter) and pname (the name of a named exclusive holder, '' for an
  unnamed one: only a producer of that name may take over a live holder at once). Its token
  is the partition's epoch. The queues of shared producers and waiters are in
  producer_queue.lua.
]]
--- @include "common"

-- The row as a table ({} fields defaulted when the key is missing: exists = false).
local function load_producer_row(key, new_inc)
  local v, bad = read_checked('HMGET', key, 'inc', 'session', 'label', 'gen', 'token',
    'expires', 'mode', 'wgen', 'wseq', 'pname')
  if bad then
    return nil, bad
  end
  if not v[1] then
    return {exists = false, inc = new_inc, session = '', label = '', gen = 0, token = 0,
      expires = 0, mode = '', wgen = 0, wseq = 0, pname = ''}
  end
  return {exists = true, inc = v[1] or '', session = v[2] or '', label = v[3] or '',
    gen = tonumber(v[4] or '0'), token = tonumber(v[5] or '0'),
    expires = tonumber(v[6] or '0'), mode = v[7] or '', wgen = tonumber(v[8] or '0'),
    wseq = tonumber(v[9] or '0'), pname = v[10] or ''}
end

-- The check of every fenced producer call: the row is the one the producer saw (G9) and
-- the producer still stands in it (G2): as the exclusive holder ('x': same session and
-- epoch) or as a shared producer ('s': the shared regime of the same epoch). Reads only
-- the four fields it judges (this runs on every send). Returns true, or nil and an error
-- reply.
local function check_standing(key, session, mode, epoch, row_inc)
  local v, bad = read_checked('HMGET', key, 'inc', 'session', 'token', 'mode')
  if bad then
    return nil, bad
  end
  local token = (v[3] or 0) + 0
  bad = check_incarnation(v[1], row_inc)
  if bad then
    return nil, bad
  end
  if token < epoch then
    return nil, fail(E.STATE_LOST, 'token', epoch, token)
  end
  local row_mode = v[4] or ''
  if mode == 'x' then
    if row_mode ~= 'x' or v[2] ~= session or token ~= epoch then
      return nil, fail(E.PRODUCER_FENCED, epoch, token, 'superseded')
    end
  elseif mode ~= 's' or row_mode ~= 's' or token ~= epoch then
    return nil, fail(E.PRODUCER_FENCED, epoch, token, 'superseded')
  end
  return true
end

local function save_producer_row(key, row)
  redis.call('HSET', key, 'inc', row.inc, 'session', row.session, 'label', row.label,
    'gen', row.gen, 'token', row.token, 'expires', row.expires, 'mode', row.mode,
    'wgen', row.wgen, 'wseq', row.wseq, 'pname', row.pname)
end
