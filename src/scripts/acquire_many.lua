-- Acquire several locks at once, all or none, with the master's data epoch (restart
-- quarantine), the cluster record and, optionally, the fence counters (fencing tokens).
-- Every lock key is set exactly as by `SET key value NX PX ttl`, and the client's holder
-- record kept alive as `acquire.lua` does, but only when every one of them is free: a master that holds any of them for another
-- value grants none.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] the holder record (`holder.lua`), KEYS[3..] for each lock, in the caller's
-- (sorted) order: lock key, fence counter, owner record (another kind's)
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label
-- Returns {code, epoch record, each lock's fence counter or false,
--          each lock's holder's pttl or -3 where it was free, detail or false}
-- code: 1 granted every lock, 0 held (some lock holds another value; none granted), -3 a
-- name holds another kind of lock (detail: its kind; the fifth element then holds only
-- that lock's position in the list, from 1); or the preamble's -2
local n = (#KEYS - 2) / 3
local fences, pttls = {}, {}
local free = 0
for i = 1, n do
  local key, owner = KEYS[3 * i], KEYS[3 * i + 2]
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= 'string' then
    return {-3, epoch, {}, {i}, kind}
  end
  -- A key that is there may be another kind's: a read-write lock keeps its writer's value
  -- or its readers' mark under its name (docs/design.md §16), and its owner record says
  -- so. A free name is no other kind's.
  local owned = kind == 'string' and redis.call('HGET', owner, 'kind')
  if owned and owned ~= 'lock' then
    return {-3, epoch, {}, {i}, owned}
  end
  fences[i] = false
  if ARGV[5] == '1' then
    fences[i] = redis.call('GET', KEYS[3 * i + 1])
  end
  if kind == 'none' then
    pttls[i] = -3
    free = free + 1
  else
    pttls[i] = redis.call('PTTL', key)
  end
end
local all = free == n
local granted = 0
for i = 1, n do
  if all and pttls[i] == -3 then
    redis.call('SET', KEYS[3 * i], ARGV[3], 'NX', 'PX', ARGV[4])
    granted = granted + 1
  end
end
if granted > 0 then
  hold(KEYS[2], ARGV[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
end
return {granted > 0 and 1 or 0, epoch, fences, pttls, false}
