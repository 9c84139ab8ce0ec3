--[[
  Judging a resend (G5): a batch whose sequences its PID wrote before is answered from the
  duplicate window with its original offsets, or refused with the reason it cannot be -
  never written again. The append and the resolve judge it alike.

  Functions only: no KEYS or ARGV of its own (callers pass the keys and values it works
  on); each function says what it returns.
]]
--- @include "common"
--- @include "dedup_window"
--- @include "partition"

-- A batch first .. last at or below a state's last sequence s (a resend of sequences that
-- were written before): its window entry if it is exactly a batch of the window with the
-- same digest, else nil and an error reply naming why it cannot be answered:
--   straddles          it also holds sequences past s: refused whole (resend with the
--                      batch boundaries used before);
--   other-records      its range is in the window but was written by other records (or
--                      cuts across the window's batches);
--   older-than-window  it is older than the window: written before, offsets forgotten.
local function judge_resend(win, pid, b, window, s, first, last, digest)
  if last > s then
    return nil, fail(E.DUPLICATE_SEQUENCE, pid, first, last, 'straddles')
  end
  local seen, oldest = find_batch(win, pid, b, window, first)
  if seen ~= nil and seen[2] == last and seen[3] == digest then
    return seen
  end
  local reason = (oldest ~= nil and first >= oldest) and 'other-records' or 'older-than-window'
  return nil, fail(E.DUPLICATE_SEQUENCE, pid, first, last, reason)
end

-- The epoch the record at ``offset`` of ``stream`` carries (a batch answered from the
-- window may have been written by a newer incarnation of its PID, which resent it under
-- its own epoch): the number as stored, or -1 once retention trimmed the record away.
local function written_epoch(stream, offset)
  local id = offset_id(offset)
  local entry = redis.call('XRANGE', stream, id, id)[1]
  if entry then
    for i = 1, #entry[2], 2 do
      if entry[2][i] == 'e' then
        return entry[2][i + 1]
      end
    end
  end
  return -1
end

