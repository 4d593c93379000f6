-- Downgrade a write lease to a read lease (docs/design.md §16): where the writer key holds
-- our value, set our reader key with the writer key's remaining PTTL, delete the writer
-- key and publish a release notice, so that waiting readers wake. The data epoch and the
-- cluster record are checked by the preamble as for every lock script.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] epoch record, KEYS[2] cluster
-- record, ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[3] writer key, KEYS[4] owner record, KEYS[5] reader index, KEYS[6] our reader key
-- ARGV[3] value, ARGV[4] release channel
-- Returns {1 converted | 0 missing | -1 held by another value, epoch, false}; or
--          the preamble's -2
local current = redis.call('GET', KEYS[3])
if current == false then
  return {0, epoch, false}
elseif current ~= ARGV[3] then
  return {-1, epoch, false}
end
local left = redis.call('PTTL', KEYS[3])
if left <= 0 then
  return {0, epoch, false}
end
redis.call('SET', KEYS[6], ARGV[3], 'PX', left)
redis.call('SADD', KEYS[5], ARGV[3])
if redis.call('PTTL', KEYS[5]) < left then
  redis.call('PEXPIRE', KEYS[5], left)
end
redis.call('DEL', KEYS[3])
if redis.call('HGET', KEYS[4], 'value') == ARGV[3] then
  redis.call('HDEL', KEYS[4], 'value', 'client', 'host', 'pid', 'label', 'acquired_ms', 'token')
end
redis.call('PUBLISH', ARGV[4], KEYS[3])
return {1, epoch, false}
