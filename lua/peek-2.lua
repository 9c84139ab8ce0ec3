--[[
  peek: who holds one (group, resource) now, by server time, and how many candidates wait for
  it (elections). Read-only.

  KEYS[1]  the ownership row (hash)
  KEYS[2]  the candidates of an election (sorted set: member -> lease expiry in server ms);
           a key that does not exist counts no candidates
  ARGV     none

  Returns {holder_label, token, generation, since_ms, expires_ms, now_ms, incarnation,
    candidates}: holder_label is '' when nobody holds it (never claimed, released, or the
    lease lapsed by server time); token and generation are kept after a release.
  Errors: WRONG_TYPE.
]]
--- @include "common"
--- @include "ownership"

local row, bad = load_row(KEYS[1])
if bad then return bad end
local now = now_ms()
local candidates, bad2 = read_checked('ZCOUNT', KEYS[2], '(' .. now, '+inf')
if bad2 then return bad2 end
if row == nil then
  return {'', 0, 0, 0, 0, now, '', candidates}
end
local label = row.label
if row.session == '' or row.expires <= now then
  label = ''
end
local since = tonumber(redis.call('HGET', KEYS[1], 'since') or '0')
return {label, row.token, row.gen, since, row.expires, now, row.inc, candidates}
