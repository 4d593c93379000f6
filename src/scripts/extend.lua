-- Compare-and-PEXPIRE: reset the TTL of KEYS[1] (and of its owner record) to ARGV[2] ms if
-- it holds our value ARGV[1]. A missing key is never set again: it may have been
-- force-unlocked, and setting it would undo that.
-- With ARGV[3] (an id for a new epoch) non-empty, also reads the data epoch KEYS[2],
-- starting a new one if it is missing (restart quarantine).
-- KEYS[3] cluster record, KEYS[4] owner record; ARGV[4] the caller's cluster fingerprint
-- ('' when it knows no record).
-- Returns {1 extended | 0 missing | -1 held by another value | -2 the cluster record's
--          fingerprint differs, epoch or false, time us, the record's fingerprint or false}
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = false
if ARGV[3] ~= '' then
  epoch = redis.call('GET', KEYS[2])
  if not epoch then
    epoch = ARGV[3] .. ':' .. now
    redis.call('SET', KEYS[2], epoch)
  end
end
local recorded = redis.call('HGET', KEYS[3], 'fingerprint')
if (recorded or '') ~= ARGV[4] then
  return {-2, epoch, now, recorded}
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('HGET', KEYS[4], 'value') == ARGV[1] then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
  return {1, epoch, now, false}
elseif current == false then
  return {0, epoch, now, false}
end
return {-1, epoch, now, false}
