--[[
  The append's fast path (included first by append-9.lua, whose KEYS and ARGV it reads).

  It takes the common send only: a producer that stands, the next batch of a live PID
  state it owns (or a producer that is not idempotent), without message ids, on a
  partition with records. It
  reads what the checks need and writes exactly what the general path would, with no helper
  closures (Lua creates one per `local function` on every call), no tables of its own and
  few C calls: it compares strings as stored (the scripts store every number as plain
  decimal digits) instead of converting them. Anything else - any check that would fail, a
  key of another type, a first batch, a duplicate, a stale expiry index entry - leaves it
  before its first write, and the general path after it runs the whole sequence from the
  start, so every error, and every answer but this one, is the general path's.

  It returns only a successful append; when it does not return, nothing was written and the
  general path runs. A test or benchmark that wants one path alone loads this include by
  itself, or the append without it.
]]

do
  -- (Locals: a global costs a table lookup at every use.)
  local call, try, KEYS, ARGV = redis.call, redis.pcall, KEYS, ARGV
  local seen_next, epoch, ttl_ms, pid_gen, first_seq, expected, mode, producer, name =
    string.match(ARGV[2], '^(%d+) (%d+) ([1-9]%d*) (%d+) (%d*) [01] (%d*) ([sx]) (%S+) (%S*)$')
  local meta = KEYS[1]
  -- (pidexp is read only for a PID state older than a second: every partition's is at
  -- least 1000 ms, so a younger one is live.)
  local v = try('HMGET', meta, 'inc', 'next', 'start', 'maxlen', 'dedupw')
  local next_s, start_s = v[2], v[3]
  -- Each integer argument as the general path takes it (int_arg: at most 15 digits here);
  -- the stored ones are '%d' digits, so equal strings are equal numbers. A partition
  -- without records (next 0) leaves: its stream may be missing (stream_lost).
  -- (A layout with '|' carries message ids: the general path judges them.)
  if seen_next and v[1] == ARGV[1] and next_s and next_s ~= '0' and start_s
      and not string.find(ARGV[6], '|', 1, true)
      and #seen_next <= 15 and #epoch <= 15 and #ttl_ms <= 15 and #pid_gen <= 15
      and #first_seq <= 15 and (expected == '' or expected == next_s) then
    local next_offset = next_s + 0
    local session, row_key = ARGV[3], KEYS[3]
    local w
    if mode == 's' then
      w = try('HMGET', row_key, 'inc', 'token', 'mode')
    else
      w = try('HMGET', row_key, 'inc', 'token', 'mode', 'session')
    end
    -- G9 and G2 (check_partition, check_standing).
    local standing = (seen_next == next_s or next_offset >= seen_next + 0) and w[1] == ARGV[4]
      and w[2] == epoch and w[3] == mode and (mode == 's' or w[4] == session)
    if standing and name ~= '' then
      -- check_name: a name nobody holds, or held by this incarnation (the header's producer
      -- holds no space, so check_name's match would split this string the same way).
      local owner = try('HGET', KEYS[6], name)
      standing = owner == false or owner == producer .. ' ' .. pid_gen
    end
    if standing then
      local pids, raw, g, s, tw, x, o, b = KEYS[4], nil, nil, nil, nil, nil, nil, nil
      if first_seq ~= '' then
        raw = try('HGET', pids, producer)
        if type(raw) == 'string' then
          -- STATE_RE's fields (include/pid_state.lua), of a state with a last sequence
          -- of 0 or more.
          g, s, tw, x, o, b = string.match(raw, '^(%d+) (%d+) (%d+) (%d+) ([^|;]*);(%d+)$')
        end
      end
      local t = call('TIME')
      local us = t[2]
      local l = #us
      -- now_ms() as '%d' digits, without a format call.
      local ts = t[1] .. (l == 6 and string.sub(us, 1, 3) or l == 5 and '0' .. string.sub(us, 1, 2)
        or l == 4 and '00' .. string.sub(us, 1, 1) or '000')
      local now = ts + 0
      local first_s = first_seq ~= '' and first_seq + 0
      -- G5: this PID's own live state (check_owner, stored_pid), and this batch the next
      -- one (first_seq as '%d' digits: as long as the last sequence, or one digit longer
      -- and a power of ten). The expiry index entry is fresh (else check_type_or_none and
      -- a ZADD: the general path). The window slot this batch takes is read first: a
      -- window key of another type leaves before any write (the general path refuses it).
      local window = (v[5] or 5) + 0
      if first_seq == '' or g == pid_gen and o == session and first_s == s + 1
          and (#first_seq == #s or #first_seq == #s + 1 and first_s == 10 ^ #s)
          and now - x < 60000
          and (now - tw < 1000 or tw + 0 >= now - (call('HGET', meta, 'pidexp') or 604800000))
          and (first_seq == '' or type(try('HEXISTS', KEYS[7],
            producer .. ':' .. string.format('%d', (b + 0) % window))) == 'number') then
        local stream, layout = KEYS[2], ARGV[6]
        local n = #layout
        -- append_records: the first XADD goes through pcall with NOMKSTREAM, so a stream
        -- that is missing or of another type leaves with nothing written.
        local add, pos, i, id, reply = try, 7, 1, nil, nil
        while i <= n do
          local shape = string.byte(layout, i) - 48
          id = string.format('%d', next_offset + i)
          if shape == 0 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos])
            pos = pos + 1
          elseif shape == 1 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1])
            pos = pos + 2
          elseif shape == 2 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'h', ARGV[pos + 1])
            pos = pos + 2
          else
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1], 'h', ARGV[pos + 2])
            pos = pos + 3
          end
          if add == try then
            if type(reply) ~= 'string' then
              break
            end
            add = call
          end
          i = i + 1
        end
        if n > 0 and i > n then
          -- Retention, then the new next offset ('start' is written when it moved only:
          -- the same value as stored otherwise).
          local maxlen = v[4]
          local last = next_offset + n
          maxlen = maxlen ~= '0' and (maxlen or 0) + 0 or 0
          if maxlen > 0 and last - start_s > maxlen then
            local start = last - maxlen
            start_s = string.format('%d', start)
            call('XTRIM', stream, 'MINID', string.format('0-%d', start + 1))
            call('HSET', meta, 'next', id, 'start', start_s)
          else
            call('HSET', meta, 'next', id)
          end
          if mode == 'x' then
            call('HSET', row_key, 'expires', string.format('%d', now + ttl_ms))
          end
          if first_seq ~= '' then
            -- save_batch: the same strings, from the stored digits.
            local last_s = n == 1 and first_seq or string.format('%d', first_s + n - 1)
            call('HSET', KEYS[7], producer .. ':' .. string.format('%d', (b + 0) % window),
              first_seq .. ' ' .. last_s .. ' ' .. ARGV[5] .. ' ' .. next_s)
            call('HSET', pids, producer, g .. ' ' .. last_s .. ' ' .. ts .. ' ' .. x .. ' '
              .. session .. ';' .. string.format('%d', b + 1))
          end
          return next_s .. ' ' .. ts .. ' ' .. start_s .. ' 0 ' .. epoch
        end
      end
    end
  end
end
