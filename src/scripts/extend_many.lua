-- Compare-and-PEXPIRE of every key of a lease over several keys, all or none: if every
-- lock key holds our value, reset each one's TTL, and its owner record's where it is this
-- value's (a semaphore's permit, as `extend.lua` does), and keep the holder record alive
-- as long; if any is missing or held by another value, extend none. A missing key is
-- never set again (it may have been force-unlocked).
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, '' not to read the epoch, ARGV[2] the
-- caller's cluster fingerprint):
-- KEYS[2] the holder record, KEYS[3..] per lock: lock key, owner record; ARGV[3] value,
-- ARGV[4] ttl ms
-- Returns {1 every key extended | 0 a key missing | -1 a key held by another value,
--          epoch or false, false}; or the preamble's -2
local missing = false
for i = 3, #KEYS, 2 do
  local current = value(KEYS[i])
  if current == false then
    missing = true
  elseif current ~= ARGV[3] then
    return {-1, epoch, false}
  end
end
if missing then
  return {0, epoch, false}
end
for i = 3, #KEYS, 2 do
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
  if redis.call('TYPE', KEYS[i + 1])['ok'] == 'hash'
      and redis.call('HGET', KEYS[i + 1], 'value') == ARGV[3] then
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[4])
  end
end
local held = redis.call('PTTL', KEYS[2])
if held >= 0 and held < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return {1, epoch, false}
