-- Acquire several locks at once, all or none, with the master's data epoch (restart
-- quarantine), the cluster record and, optionally, the fence counters (fencing tokens).
-- Every lock key is set exactly as by `SET key value NX PX ttl`, each with its owner record,
-- but only when every one of them is free: a master that holds any of them for another
-- value grants none.
-- KEYS[1] epoch record, KEYS[2] cluster record, then for each lock, in the caller's
-- (sorted) order: lock key, fence counter, owner record
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch, ARGV[4] fence: '0' ignore,
-- '1' read, ARGV[5] the caller's cluster fingerprint ('' when it knows no record),
-- ARGV[6] client id, ARGV[7] host, ARGV[8] process id, ARGV[9] label
-- Returns {code, epoch record, server time us, each lock's fence counter or false,
--          each lock's holder's pttl or -3 where it was free, detail or false}
-- code: 1 granted every lock, 0 held (some lock holds another value; none granted), -2 the
-- cluster record's fingerprint differs (detail: the record's fingerprint, or false when
-- there is no record), -3 a name holds another kind of lock (detail: its kind; the fifth
-- element then holds only that lock's position in the list, from 1)
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[3] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
end
local recorded = redis.call('HGET', KEYS[2], 'fingerprint')
if (recorded or '') ~= ARGV[5] then
  return {-2, epoch, now, {}, {}, recorded}
end
local n = (#KEYS - 2) / 3
local fences, pttls = {}, {}
local free = 0
for i = 1, n do
  local key, owner = KEYS[3 * i], KEYS[3 * i + 2]
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= 'string' then
    return {-3, epoch, now, {}, {i}, kind}
  end
  -- The owner record marks the name whatever the key holds: a read-write lock held by
  -- readers only has no key here, only its record (kind 'rwlock').
  local owned = redis.call('HGET', owner, 'kind')
  if owned and owned ~= 'lock' then
    return {-3, epoch, now, {}, {i}, owned}
  end
  fences[i] = false
  if ARGV[4] == '1' then
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
    local key, owner = KEYS[3 * i], KEYS[3 * i + 2]
    redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2])
    redis.call('DEL', owner)
    redis.call('HSET', owner, 'kind', 'lock', 'value', ARGV[1], 'client', ARGV[6],
      'host', ARGV[7], 'pid', ARGV[8], 'label', ARGV[9],
      'acquired_ms', t[1] .. string.format('%03d', math.floor(t[2] / 1000)))
    redis.call('PEXPIRE', owner, ARGV[2])
    granted = granted + 1
  end
end
return {granted > 0 and 1 or 0, epoch, now, fences, pttls, false}
