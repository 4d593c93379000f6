-- Acquire with the master's data epoch (restart quarantine), the cluster record and,
-- optionally, the fence counter (fencing tokens). The lock key is set exactly as by
-- `SET key value NX PX ttl`; beside it, the owner record, with the same expiry.
-- KEYS[1] lock key, KEYS[2] epoch record, KEYS[3] fence counter, KEYS[4] cluster record,
-- KEYS[5] owner record, KEYS[6] ticket counter of the lock's waiter queue
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch,
-- ARGV[4] fence: '0' ignore, '1' read, ARGV[5] the caller's cluster fingerprint ('' when
-- it knows no record), ARGV[6] client id, ARGV[7] host, ARGV[8] process id, ARGV[9] label
-- Returns {code, epoch record, server time us, fence counter or false,
--          holder's pttl or -3, detail or false, ticket counter (refused) or false}
-- code: 1 granted, 0 held by another value, -2 the cluster record's fingerprint differs
-- (detail: the record's fingerprint, or false when there is no record), -3 the name holds
-- another kind of lock (detail: its kind). Only a refusal reads the ticket counter (0 when
-- missing): a waiter's place in the queue is one above it (docs/design.md §17).
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[3] .. ':' .. now
  redis.call('SET', KEYS[2], epoch)
end
local recorded = redis.call('HGET', KEYS[4], 'fingerprint')
if (recorded or '') ~= ARGV[5] then
  return {-2, epoch, now, false, -3, recorded, false}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return {-3, epoch, now, false, -3, kind, false}
end
local owned = redis.call('HGET', KEYS[5], 'kind')
if owned and owned ~= 'lock' then
  return {-3, epoch, now, false, -3, owned, false}
end
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local fence = false
if ARGV[4] == '1' then
  fence = redis.call('GET', KEYS[3])
end
local pttl = -3
local ticket = false
if ok then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'kind', 'lock', 'value', ARGV[1], 'client', ARGV[6],
    'host', ARGV[7], 'pid', ARGV[8], 'label', ARGV[9],
    'acquired_ms', t[1] .. string.format('%03d', math.floor(t[2] / 1000)))
  redis.call('PEXPIRE', KEYS[5], ARGV[2])
else
  pttl = redis.call('PTTL', KEYS[1])
  ticket = redis.call('GET', KEYS[6]) or '0'
end
return {ok and 1 or 0, epoch, now, fence, pttl, false, ticket}
