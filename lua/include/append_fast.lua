--[[
  The append's fast path (included first by append-9.lua, whose KEYS and ARGV it reads).

  It takes the common send only: a producer that stands, the next batch of a live PID
  state it owns (or a producer that is not idempotent), on a partition with records,
  without message ids or with ids on every record of one caller's call that the partition
  does not hold (not even aged out: judging those is the general path's). It
  reads what the checks need and writes exactly what the general path would, with no helper
  closures (Lua creates one per `local function` on every call), no tables of its own but
  the ids' (a call's ids go to Redis as one HMGET, HSET and RPUSH) and
  few C calls: it compares strings as stored (the scripts store every number as plain
  decimal digits) instead of converting them. Anything else - any check that would fail, a
  key of another type, a first batch, a duplicate, a stale expiry index entry, a known id -
  leaves it before its first write, and the general path after it runs the whole sequence
  from the start, so every error, and every answer but this one, is the general path's.

  It returns only a successful append; when it does not return, nothing was written and the
  general path runs. A test or benchmark that wants one path alone loads this include by
  itself, or the append without it.
]]

do
  -- (Locals: a global costs a table lookup at every use.)
  local call, try, KEYS, ARGV = redis.call, redis.pcall, KEYS, ARGV
  local seen_next, epoch, ttl_ms, pid_gen, first_seq, expected, mode, producer, name =
    string.match(ARGV[2], '^(%d+) (%d+) ([1-9]%d*) (%d+) (%d*) [01] (%d*) ([sx]) (%S+) (%S*)$')
  local meta, layout = KEYS[1], ARGV[6]
  -- A layout with '|' carries message ids: taken here when every record has one and they
  -- are one caller's call ("<shapes>|<n>", see include/message_ids.lua).
  local bar, units = string.find(layout, '|', 1, true), nil
  if bar then
    units = string.sub(layout, bar + 1)
    layout = string.sub(layout, 1, bar - 1)
  end
  -- Everything read of the partition in one HMGET, whatever the path below needs of it.
  local v
  if bar then
    v = try('HMGET', meta, 'inc', 'next', 'start', 'maxlen', 'dedupw', 'pidexp', 'midw', 'midttl')
  else
    v = try('HMGET', meta, 'inc', 'next', 'start', 'maxlen', 'dedupw', 'pidexp')
  end
  local next_s, start_s = v[2], v[3]
  -- Each integer argument as the general path takes it (int_arg: at most 15 digits here);
  -- the stored ones are '%d' digits, so equal strings are equal numbers. A partition
  -- without records (next 0) leaves: its stream may be missing (stream_lost).
  if seen_next and v[1] == ARGV[1] and next_s and next_s ~= '0' and start_s
      and (not bar or units == #layout .. '' and not string.find(layout, '[^4-7]'))
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
          and tw + 0 >= now - (v[6] or 604800000)
          and (first_seq == '' or type(try('HEXISTS', KEYS[7],
            producer .. ':' .. string.format('%d', (b + 0) % window))) == 'number') then
        local stream, n = KEYS[2], #layout
        local mids, midq, ids, head, clear = KEYS[8], KEYS[9], nil, nil, true
        local spread = unpack or table.unpack
        if bar then
          -- judge_units of one call: every id unknown (one HMGET; a known or aged entry is
          -- the general path's), and the queue a list, whose head, read now, is what
          -- remember_ids ages out first. Each id is its record's last part.
          ids = {}
          local pos = 7
          for j = 1, n do
            local shape = string.byte(layout, j)
            local k = shape == 52 and 1 or shape == 55 and 3 or 2
            ids[j] = ARGV[pos + k]
            pos = pos + k + 1
          end
          local found = try('HMGET', mids, spread(ids))
          clear = true
          if found and found.err then
            clear = false  -- a key of another type: the general path refuses it
          else
            for j = 1, n do
              if found[j] then
                clear = false
              end
            end
          end
          if clear then
            head = try('LINDEX', midq, 0)
            clear = type(head) ~= 'table'
          end
        end
        -- append_records: the first XADD goes through pcall with NOMKSTREAM, so a stream
        -- that is missing or of another type leaves with nothing written.
        local add, pos, i, id, reply = try, 7, 1, nil, nil
        while clear and i <= n do
          local shape = string.byte(layout, i) - 48
          id = string.format('%d', next_offset + i)
          if shape == 0 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos])
            pos = pos + 1
          elseif shape == 4 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'm', ARGV[pos + 1])
            pos = pos + 2
          elseif shape == 1 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1])
            pos = pos + 2
          elseif shape == 2 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'h', ARGV[pos + 1])
            pos = pos + 2
          elseif shape == 3 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1], 'h', ARGV[pos + 2])
            pos = pos + 3
          elseif shape == 5 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1], 'm', ARGV[pos + 2])
            pos = pos + 3
          elseif shape == 6 then
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'h', ARGV[pos + 1], 'm', ARGV[pos + 2])
            pos = pos + 3
          else
            reply = add('XADD', stream, 'NOMKSTREAM', '0-' .. id, 't', ts, 'e', epoch, 'p',
              producer, 'v', ARGV[pos], 'k', ARGV[pos + 1], 'h', ARGV[pos + 2], 'm',
              ARGV[pos + 3])
            pos = pos + 4
          end
          if add == try then
            if type(reply) ~= 'string' then
              break
            end
            add = call
          end
          i = i + 1
        end
        if clear and n > 0 and i > n then
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
          if bar then
            -- remember_ids: the same fields and entries, then the same forgetting (by the
            -- window's count, then a few past its age).
            local fields, entries, tail = {}, {}, ' ' .. epoch .. ' ' .. ts
            for j = 1, n do
              local o = string.format('%d', next_offset + j - 1)
              fields[2 * j - 1], fields[2 * j] = ids[j], o .. tail
              entries[j] = ts .. ' ' .. o .. ' ' .. ids[j]
            end
            call('HSET', mids, spread(fields))
            local len = call('RPUSH', midq, spread(entries))
            local id_window, id_ttl = (v[7] or 10000) + 0, (v[8] or 3600000) + 0
            local old = {}
            if len > id_window then
              old = call('LPOP', midq, len - id_window)
              head = call('LINDEX', midq, 0)
            elseif not head then
              head = entries[1]
            end
            local t0 = head and string.match(head, '^(%d+) ')
            if t0 and t0 + id_ttl <= now then
              local aged = call('LRANGE', midq, 0, 31)
              local k = 0
              for _, entry in ipairs(aged) do
                local et = string.match(entry, '^(%d+) ')
                if et == nil or et + id_ttl > now then
                  break
                end
                k = k + 1
                old[#old + 1] = entry
              end
              call('LTRIM', midq, k, -1)
            end
            if #old > 0 then
              local names, prefixes = {}, {}
              for j, entry in ipairs(old) do
                local o, mid = string.match(entry, '^%d+ (%d+) (.*)$')
                names[j], prefixes[j] = mid or '', (o or '-') .. ' '
              end
              -- An entry forgets its id only while the hash names its offset.
              local current = call('HMGET', mids, spread(names))
              local gone, ng = {}, 0
              for j = 1, #names do
                local raw_id = current[j]
                if raw_id and string.find(raw_id, prefixes[j], 1, true) == 1 then
                  ng = ng + 1
                  gone[ng] = names[j]
                end
              end
              if ng > 0 then
                call('HDEL', mids, spread(gone))
              end
            end
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
