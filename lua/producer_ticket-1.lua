--[[
  producer_ticket: draw the ticket of a new incarnation of a named producer or of a saved
  producer state, once for the whole topic, before its partitions are opened (pid_open).
  Tickets only grow: two openers that race get two, and on every partition the higher one
  wins (pid_open refuses a lower one where a higher one was seen), so exactly one of them is
  the newest incarnation everywhere once both opens returned.

  For a name, the topic also keeps the PID the name was first opened with, so two first
  opens that race agree on one PID instead of each binding the name to its own.

  KEYS[1]  the topic metadata (hash)           <ns>:{<topic>}:topic
  ARGV[1]  inc        the topic incarnation the caller saw (G9)
  ARGV[2]  key        'n:<name>' for a named producer, 'p:<pid>' for a resumed unnamed one
  ARGV[3]  pid        the PID the opener would use (its resumed one, or a fresh one)

  Returns {pid, ticket}: the name's PID (the first opener's; for 'p:' keys ARGV[3]) and the
    ticket, 1 for the first open ever.
  Errors: STATE_LOST (the topic vanished or was recreated), WRONG_TYPE, BAD_ARGUMENT.
]]
--- @include "common"

local key, field, pid = KEYS[1], 'tk:' .. ARGV[2], ARGV[3]
local pid_n = int_arg(pid)
if pid_n == nil or pid_n < 1 or not string.match(ARGV[2], '^[np]:%S+$') then
  return fail(E.BAD_ARGUMENT, 'ticket', ARGV[2] .. '/' .. pid)
end
local v, bad = read_checked('HMGET', key, 'inc', field)
if bad then return bad end
bad = check_incarnation(v[1], ARGV[1])
if bad then return bad end
local ticket = 1
if v[2] then
  local known_pid, last = string.match(v[2], '^(%d+) (%d+)$')
  if string.sub(ARGV[2], 1, 1) == 'n' then
    pid = known_pid
  end
  ticket = last + 1
end
redis.call('HSET', key, field, pid .. ' ' .. string.format('%d', ticket))
return {pid, ticket}
