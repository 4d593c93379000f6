-- Reads one lock for inspection and changes nothing: the lock key's type, value and PTTL,
-- its owner record, its fence counter, and the server's time.
-- KEYS[1] lock key, KEYS[2] owner record, KEYS[3] fence counter, KEYS[4] waiter queue
-- Returns {type of the lock key, its value or false (not a string), its PTTL (-2 missing,
--          -1 no expiry), the owner record's fields and values (empty when it has none),
--          the fence counter or false, the server time in ms,
--          1 when the value is a member of the waiter queue (the key is handed to that
--          waiter, which has not confirmed yet) else 0}
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then
  value = redis.call('GET', KEYS[1])
end
local pttl = redis.call('PTTL', KEYS[1])
local owner = {}
if redis.call('TYPE', KEYS[2])['ok'] == 'hash' then
  owner = redis.call('HGETALL', KEYS[2])
end
local fence = false
if redis.call('TYPE', KEYS[3])['ok'] == 'string' then
  fence = redis.call('GET', KEYS[3])
end
local queued = 0
if value and redis.call('TYPE', KEYS[4])['ok'] == 'zset' and redis.call('ZSCORE', KEYS[4], value) then
  queued = 1
end
local t = redis.call('TIME')
return {kind, value, pttl, owner, fence, t[1] .. string.format('%03d', math.floor(t[2] / 1000)),
        queued}
