--[[
  consumer_forget: remove a consumer group's ownership row of a partition that no longer
  exists (its topic was deleted), once the consumer that claimed it gave it back. A consumer
  opened through a topic handle made before the delete, or waiting while a forced delete
  ran, claims its row before it can learn the partition is gone: without this, a released
  row of the deleted topic would outlive the delete.

  KEYS[1]  the group's ownership row (hash)      <ns>:{<topic>/<p>}:own:<group>
  KEYS[2]  the partition metadata (hash)         <ns>:{<topic>/<p>}:part
  ARGV     none

  Returns 1 if the row was removed, 0 if it was kept (the partition exists: a row of a
  topic made again belongs to it; or the row is held by a live session).
  Errors: WRONG_TYPE.
]]
--- @include "common"

local row, meta = KEYS[1], KEYS[2]
local t = key_type(row)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, row)
end
if t == 'none' or key_type(meta) ~= 'none' then
  return 0
end
local v = redis.call('HMGET', row, 'session', 'expires')
if v[1] and v[1] ~= '' and tonumber(v[2] or '0') > now_ms() then
  return 0
end
redis.call('DEL', row)
return 1
