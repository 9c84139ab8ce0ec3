--[[
  claim: ask for one (group, resource) of the ownership table (G8).

  KEYS[1]  the ownership row (hash)            <ns>:{<resource>}:own:<group>
  ARGV[1]  session      the caller's session id (random per handle)
  ARGV[2]  label        the caller's owner_id, for people and logs
  ARGV[3]  generation   '' for None, else an integer >= 0
  ARGV[4]  ttl_ms       lease length in milliseconds (> 0)
  ARGV[5]  new_inc      incarnation to store if the row is created now
  ARGV[6]  seen_inc     incarnation the handle saw before ('' if none)
  ARGV[7]  seen_token   highest token the handle saw before (0 if none)
  ARGV[8]  session_ch   prefix of the severed holder's channel, <ns>:{<resource>}:session:
                        (this row's hash tag: published in this slot); the session id is
                        appended

  A grant to a new session also records 'since' (server ms): when the current term began.

  Returns {status, generation, token, expires_ms, now_ms, incarnation} where status is
    'granted' (a new grant to this session; token grew) or 'kept' (this session already held
    it, live or lapsed but unclaimed: same token, lease extended).
  Errors: CONFLICT (another live holder), STALE_GENERATION (stored G > requested g),
    STATE_LOST (G9), WRONG_TYPE (the key is not a hash).
  Notifies (last, never failing the claim; sharded pub/sub where the server has it): a
    severed holder on session_ch .. <its session>: "severed <old token> <new token> <key>".

  Rules: g None takes a free resource with G+1 or keeps the caller's own; g > 0 fails if
  G > g, else sets G := g and severs any holder; g == 0 always wins and sets G := 0. Every
  grant to a session other than the stored one sets T := T + 1; T never decreases.
]]
--- @include "common"
--- @include "ownership"

local key = KEYS[1]
local session, label, gen_arg = ARGV[1], ARGV[2], ARGV[3]
local ttl_ms = int_arg(ARGV[4])
local new_inc, seen_inc, seen_token = ARGV[5], ARGV[6], int_arg(ARGV[7])
local session_ch = ARGV[8]

if ttl_ms == nil or ttl_ms <= 0 then
  return fail(E.BAD_ARGUMENT, 'ttl_ms', ARGV[4])
end
if seen_token == nil then
  return fail(E.BAD_ARGUMENT, 'seen_token', ARGV[7])
end

local row, bad = load_row(key)
if bad then return bad end
bad = check_history(row, seen_inc, seen_token)
if bad then return bad end

local now = now_ms()
if row == nil then
  row = {inc = new_inc, session = '', label = '', gen = 0, token = 0, expires = 0}
end

local mine = row.session == session
local live = row.session ~= '' and row.expires > now
local new_gen

if gen_arg == '' then
  if mine then
    new_gen = row.gen
  elseif live then
    return fail(E.CONFLICT, row.token, row.expires - now, row.label)
  else
    new_gen = row.gen + 1
  end
else
  local g = int_arg(gen_arg)
  if g == nil or g < 0 then
    return fail(E.BAD_ARGUMENT, 'generation', gen_arg)
  end
  if g > 0 and row.gen > g then
    return fail(E.STALE_GENERATION, row.gen, g)
  end
  new_gen = g
end

-- All checks passed: write.
local severed = ''
local new_token = row.token
local status = 'kept'
if not mine then
  severed = row.session
  new_token = row.token + 1
  status = 'granted'
end
local expires = now + ttl_ms
redis.call('HSET', key,
  'inc', row.inc, 'session', session, 'label', label,
  'gen', new_gen, 'token', new_token, 'expires', expires)
if status == 'granted' then
  redis.call('HSET', key, 'since', now)
end

if severed ~= '' then
  -- "severed <old token> <new token> <group/resource key>": the old holder's handle learns
  -- it lost the grant without waiting for its next renew.
  notify_severed(session_ch, severed, row.token, new_token, key)
end
return {status, new_gen, new_token, expires, now, row.inc}
