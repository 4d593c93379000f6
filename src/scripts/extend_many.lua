-- Compare-and-PEXPIRE of every key of a lease over several keys, all or none: if every
-- lock key holds our value ARGV[1], reset each one's TTL (and its owner record's) to
-- ARGV[2] ms; if any is missing or held by another value, extend none. A missing key is
-- never set again (it may have been force-unlocked).
-- With ARGV[3] (an id for a new epoch) non-empty, also reads the data epoch KEYS[1],
-- starting a new one if it is missing (restart quarantine).
-- KEYS[1] epoch record, KEYS[2] cluster record, KEYS[3..] lock key, owner record, ...
-- ARGV[4] the caller's cluster fingerprint ('' when it knows no record).
-- Returns {1 every key extended | 0 a key missing | -1 a key held by another value | -2 the
--          cluster record's fingerprint differs, epoch or false, time us, the record's
--          fingerprint or false}
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = false
if ARGV[3] ~= '' then
  epoch = redis.call('GET', KEYS[1])
  if not epoch then
    epoch = ARGV[3] .. ':' .. now
    redis.call('SET', KEYS[1], epoch)
  end
end
local recorded = redis.call('HGET', KEYS[2], 'fingerprint')
if (recorded or '') ~= ARGV[4] then
  return {-2, epoch, now, recorded}
end
local missing = false
for i = 3, #KEYS, 2 do
  local current = redis.call('GET', KEYS[i])
  if current == false then
    missing = true
  elseif current ~= ARGV[1] then
    return {-1, epoch, now, false}
  end
end
if missing then
  return {0, epoch, now, false}
end
for i = 3, #KEYS, 2 do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
  if redis.call('HGET', KEYS[i + 1], 'value') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[2])
  end
end
return {1, epoch, now, false}
