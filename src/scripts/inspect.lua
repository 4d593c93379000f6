-- Reads one lock for inspection and changes nothing: the lock key's type, value and PTTL,
-- its owner record (kept by the other kinds of lock), the holder record its value names
-- (`holder.lua`), its fence counter, and the server's time.
-- KEYS[1] lock key, KEYS[2] owner record, KEYS[3] fence counter, KEYS[4] waiter queue;
-- ARGV[1] the holder records' common beginning (followed by a tag)
-- Returns {type of the lock key, its value or false (not a string), its PTTL (-2 missing,
--          -1 no expiry), the owner record's fields and values (empty when it has none),
--          the fence counter or false, the server time in ms,
--          1 when the value is a member of the waiter queue (the key is handed to that
--          waiter, which has not confirmed yet) else 0,
--          the holder record's fields and values (empty when the value names none)}
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
-- A value is '<tag>.<hex>', the tag naming its client's holder record (the whole value
-- without a dot), as `holder_key` in `scripts/keys.rs` reads it.
local holder = {}
local tag = value and (string.match(value, '^(.*)%.[^.]*$') or value)
if tag and redis.call('TYPE', ARGV[1] .. tag)['ok'] == 'hash' then
  holder = redis.call('HGETALL', ARGV[1] .. tag)
end
local t = redis.call('TIME')
return {kind, value, pttl, owner, fence, t[1] .. string.format('%03d', math.floor(t[2] / 1000)),
        queued, holder}
