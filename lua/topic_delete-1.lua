--[[
  topic_delete: the steps of deleting a topic on its metadata. Marked, the topic refuses
  every open (a handle that saw it gets STATE_LOST, a new one TOPIC_DELETING) while its
  partitions' keys are removed; the metadata goes last, so a delete cut short is resumed
  by running it again, and a topic of the same name is created only afterwards.

  KEYS[1]  the topic metadata (hash)           <ns>:{<topic>}:topic
  ARGV[1]  step   'mark': the topic is being deleted from now on (again if marked: a
                  resumed delete); 'unmark': the delete was refused (the topic is in use):
                  opens work again; 'drop': every partition's keys are gone: remove it
  ARGV[2]  inc    for 'unmark' and 'drop': the incarnation marked (another is not touched)

  Returns {partitions, incarnation, already} for 'mark' (already: 1 if it was marked
  before: a delete begun and not finished), 1 for the other steps (0: not that incarnation,
  nothing done).
  Errors: UNKNOWN_TOPIC (no such topic, for 'mark'), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"

local key, step = KEYS[1], ARGV[1]
local t = key_type(key)
if t ~= 'none' and t ~= 'hash' then
  return fail(E.WRONG_TYPE, t, key)
end
if step == 'mark' then
  if t == 'none' then
    return fail(E.UNKNOWN_TOPIC, key)
  end
  local v = redis.call('HMGET', key, 'partitions', 'inc', 'deleting')
  if not v[3] then
    redis.call('HSET', key, 'deleting', now_ms())
  end
  return {tonumber(v[1] or '0'), v[2] or '', v[3] and 1 or 0}
end
if t == 'none' or redis.call('HGET', key, 'inc') ~= ARGV[2] then
  return 0
end
if step == 'unmark' then
  redis.call('HDEL', key, 'deleting')
  return 1
elseif step == 'drop' then
  redis.call('DEL', key)
  return 1
end
return fail(E.BAD_ARGUMENT, 'step', step)
