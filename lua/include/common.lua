--[[
  Helpers shared by every script: error replies, integer arguments, server time, key types,
  the G9 incarnation check, notifications. Included at load time by fencing/_lua_loader.py,
  which also writes every E.<CODE> as the string literal of that code (checked against
  fencing/_codes.py).

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.
]]

-- Fail with "<CODE> <field> ...": protocol.py turns this into the typed exception.
local function fail(code, ...)
  local parts = {code}
  for i = 1, select('#', ...) do
    parts[#parts + 1] = tostring(select(i, ...))
  end
  return redis.error_reply(table.concat(parts, ' '))
end

-- Producer state expiry of partitions created before it was kept in their metadata (7 days).
local DEFAULT_PID_EXPIRY_MS = 604800000
-- Window size of partitions created before it was kept in their metadata.
local DEFAULT_DEDUP_WINDOW = 5
-- The message id window (count, age in ms) of partitions created before it was kept.
local DEFAULT_MESSAGE_ID_WINDOW = 10000
local DEFAULT_MESSAGE_ID_TTL_MS = 3600000

-- The largest integer a Lua number (a double) holds exactly: 2^53 - 1.
local MAX_INT = 9007199254740991

-- An integer argument written in decimal digits, or nil for anything else: a fraction, a
-- hex or exponent form, or a value beyond +-MAX_INT, which Lua could not represent exactly
-- (string.format('%d') of 1e30 is a negative number: a fence would silently move back).
local function int_arg(value)
  local s = tostring(value)
  if #s > 17 or not string.match(s, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n > MAX_INT or n < -MAX_INT then
    return nil
  end
  return n
end

-- Server time in milliseconds (G7: leases are judged by the server's clock only).
local function now_ms()
  local t = redis.call('TIME')
  -- Arithmetic converts the digits itself: a tonumber call costs more than the rest.
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- The Redis type of a key ('none' when missing).
local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

-- A read command whose key may hold another type: returns the reply, or nil and a
-- WRONG_TYPE error reply (cheaper than a TYPE call before every read on the hot path).
local function read_checked(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    return nil, fail(E.WRONG_TYPE, key_type(key), key)
  end
  return reply
end

-- Checks before any write that a key is of the type a script writes (or absent).
local function check_type_or_none(key, wanted)
  local t = key_type(key)
  if t ~= 'none' and t ~= wanted then
    return fail(E.WRONG_TYPE, t, key)
  end
  return nil
end

-- The same check of keys[i] against expected[i], for each key in turn.
local function check_types(keys, expected)
  for i, key in ipairs(keys) do
    local t = key_type(key)
    if t ~= 'none' and t ~= expected[i] then
      return fail(E.WRONG_TYPE, t, key)
    end
  end
  return nil
end

-- G9: a call names the incarnation it saw of a key (seen); stored is the one there now, nil
-- or false when the key (or its incarnation) is gone. Returns nil when they are the same,
-- else the STATE_LOST reply: 'missing' when gone, 'incarnation' when another (the key was
-- recreated). Every script judges the pair through this, in this order.
local function check_incarnation(stored, seen)
  if not stored then
    return fail(E.STATE_LOST, 'missing', seen, '-')
  end
  if stored ~= seen then
    return fail(E.STATE_LOST, 'incarnation', seen, stored)
  end
  return nil
end

-- Publish without ever failing the script: a missing pub/sub permission must not undo a
-- grant that already happened. Always the last thing a script does.
-- Sharded pub/sub first: every channel carries the hash tag of the script's keys, so on a
-- cluster SPUBLISH stays on this slot's shard instead of crossing every node (PUBLISH is
-- broadcast over the cluster bus). A server without SPUBLISH (before Redis 7) or a user not
-- allowed it gets a plain PUBLISH instead; the client's notifier makes the same choice on its
-- side (SSUBSCRIBE, else SUBSCRIBE), so both ends agree on any one server. A message that
-- still goes astray costs the listener latency only: it re-checks by server time anyway.
local function notify(channel, message)
  local sent = redis.pcall('SPUBLISH', channel, message)
  if type(sent) == 'table' and sent.err then
    redis.pcall('PUBLISH', channel, message)
  end
end

-- Tell a severed session, on its channel for this resource: "severed <old token> <new token>
-- <row key>". session_ch is the prefix <ns>:{<resource>}:session: (the row's hash tag).
local function notify_severed(session_ch, session, old_token, new_token, row_key)
  notify(session_ch .. session, 'severed ' .. old_token .. ' ' .. new_token .. ' ' .. row_key)
end
