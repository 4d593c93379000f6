-- The holder record (docs/design.md §11): who a client is (its id, host, process id and
-- label), written once per client and label on each master, not per lock. A lock's value
-- begins with the record's tag, so `inspect.lua` finds its holder from the value alone.
-- Joined at compile time in front of the scripts that grant a lock (`scripts/sources.rs`).
--
-- hold(record, ttl, client, host, pid, label): after a grant with `ttl` ms, keeps the
-- record alive at least as long as the lock, and at least half an hour: when it would
-- expire sooner (or is missing) it is written again, for an hour or the lock's TTL if
-- longer. So a client whose grant here asked for the record knows it outlives the next
-- half hour, and meanwhile sends an empty client id for locks it outlives: the script
-- then leaves the record alone, at no cost. Asked, the common case costs one PTTL. A key
-- of another type there is left alone, never deleted (under another key prefix on the
-- same master it may be another client's lock) and never written to (which would fail
-- the script after its grant): the client then has no record there.
local HOLDER_MS = 3600000
local function hold(record, ttl, client, host, pid, label)
  if client == '' then return end
  local ms = tonumber(ttl)
  if redis.call('PTTL', record) >= math.max(ms, HOLDER_MS / 2) then return end
  local kind = redis.call('TYPE', record)['ok']
  if kind ~= 'none' and kind ~= 'hash' then return end
  redis.call('DEL', record)
  redis.call('HSET', record, 'client', client, 'host', host, 'pid', pid, 'label', label)
  redis.call('PEXPIRE', record, math.max(ms, HOLDER_MS))
end
