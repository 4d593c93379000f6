-- Acquire with the master's data epoch (restart quarantine), the cluster record and,
-- optionally, the fence counter (fencing tokens). The lock key is set exactly as by
-- `SET key value NX PX ttl`; beside it, the owner record, with the same expiry.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] epoch record, KEYS[2] cluster
-- record, ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[3] lock key, KEYS[4] fence counter, KEYS[5] owner record, KEYS[6] ticket counter
-- of the lock's waiter queue
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label
-- Returns {code, epoch record, server time us, fence counter or false,
--          holder's pttl or -3, detail or false, ticket counter (refused) or false}
-- code: 1 granted, 0 held by another value, -3 the name holds another kind of lock
-- (detail: its kind); or the preamble's -2. Only a refusal reads the ticket counter (0
-- when missing): a waiter's place in the queue is one above it (docs/design.md §17).
local kind = redis.call('TYPE', KEYS[3])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return {-3, epoch, now, false, -3, kind, false}
end
local owned = redis.call('HGET', KEYS[5], 'kind')
if owned and owned ~= 'lock' then
  return {-3, epoch, now, false, -3, owned, false}
end
local ok = redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4])
local fence = false
if ARGV[5] == '1' then
  fence = redis.call('GET', KEYS[4])
end
local pttl = -3
local ticket = false
if ok then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'kind', 'lock', 'value', ARGV[3], 'client', ARGV[6],
    'host', ARGV[7], 'pid', ARGV[8], 'label', ARGV[9],
    'acquired_ms', t[1] .. string.format('%03d', math.floor(t[2] / 1000)))
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
else
  pttl = redis.call('PTTL', KEYS[3])
  ticket = redis.call('GET', KEYS[6]) or '0'
end
return {ok and 1 or 0, epoch, now, fence, pttl, false, ticket}
