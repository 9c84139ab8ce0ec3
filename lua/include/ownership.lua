--[[
  Reading one row of the ownership table (G8) and the G9 checks every fenced call makes.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.

  Row fields: inc (incarnation), session, label, gen (generation G), token (T),
  expires (lease expiry, server ms).
]]
--- @include "common"

-- Returns the row as a table, or nil when the key does not exist, or an error reply.
local function load_row(key)
  local t = key_type(key)
  if t == 'none' then
    return nil
  end
  if t ~= 'hash' then
    return nil, fail(E.WRONG_TYPE, t, key)
  end
  local v = redis.call('HMGET', key, 'inc', 'session', 'label', 'gen', 'token', 'expires')
  return {
    inc = v[1] or '',
    session = v[2] or '',
    label = v[3] or '',
    gen = tonumber(v[4] or '0'),
    token = tonumber(v[5] or '0'),
    expires = tonumber(v[6] or '0'),
  }
end

-- G9: the handle saw incarnation seen_inc and token seen_token ('' and 0 when it saw none).
-- Returns an error reply when the store went backwards, else nil.
local function check_history(row, seen_inc, seen_token)
  if seen_inc == '' then
    return nil
  end
  local lost = check_incarnation(row and row.inc, seen_inc)
  if lost then
    return lost
  end
  if row.token < seen_token then
    return fail(E.STATE_LOST, 'token', seen_token, row.token)
  end
  return nil
end

-- The fenced-call check: the caller's (session, token) must be the stored ones. The label
-- names the current holder; it is empty when nobody holds the resource (released).
local function check_holder(row, session, token)
  if row.session ~= session or row.token ~= token then
    local holder = row.label
    if row.session == '' then
      holder = ''
    end
    return fail(E.FENCED, token, row.token, holder)
  end
  return nil
end

-- The whole check of a fenced call on a row (G9, holder, live lease by server time).
-- Returns now_ms, or nil and an error reply.
local function check_live_grant(row, session, token, seen_inc)
  local bad = check_history(row, seen_inc, token)
  if bad then return nil, bad end
  bad = check_holder(row, session, token)
  if bad then return nil, bad end
  local now = now_ms()
  if row.expires <= now then
    return nil, fail(E.LEASE_EXPIRED, token, now - row.expires)
  end
  return now
end
