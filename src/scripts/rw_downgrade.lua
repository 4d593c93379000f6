-- Downgrade a write lease to a read lease (docs/design.md §16): where the writer key holds
-- our value, set our reader key with the writer key's remaining PTTL, delete the writer
-- key and publish a release notice, so that waiting readers wake. The data epoch and the
-- cluster record are checked as by `extend.lua`.
-- KEYS[1] writer key, KEYS[2] epoch record, KEYS[3] cluster record, KEYS[4] owner record,
-- KEYS[5] reader index, KEYS[6] our reader key
-- ARGV[1] value, ARGV[2] id for a new epoch, ARGV[3] the caller's cluster fingerprint,
-- ARGV[4] release channel
-- Returns {1 converted | 0 missing | -1 held by another value | -2 the cluster record's
--          fingerprint differs, epoch, time us, the record's fingerprint or false}
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[2] .. ':' .. now
  redis.call('SET', KEYS[2], epoch)
end
local recorded = redis.call('HGET', KEYS[3], 'fingerprint')
if (recorded or '') ~= ARGV[3] then
  return {-2, epoch, now, recorded}
end
local current = redis.call('GET', KEYS[1])
if current == false then
  return {0, epoch, now, false}
elseif current ~= ARGV[1] then
  return {-1, epoch, now, false}
end
local left = redis.call('PTTL', KEYS[1])
if left <= 0 then
  return {0, epoch, now, false}
end
redis.call('SET', KEYS[6], ARGV[1], 'PX', left)
redis.call('SADD', KEYS[5], ARGV[1])
if redis.call('PTTL', KEYS[5]) < left then
  redis.call('PEXPIRE', KEYS[5], left)
end
redis.call('DEL', KEYS[1])
if redis.call('HGET', KEYS[4], 'value') == ARGV[1] then
  redis.call('HDEL', KEYS[4], 'value', 'client', 'host', 'pid', 'label', 'acquired_ms', 'token')
end
redis.call('PUBLISH', ARGV[4], KEYS[1])
return {1, epoch, now, false}
