-- Downgrade a write lease to a read lease (docs/design.md §16): where the writer key holds
-- our value, set our reader key with the writer key's remaining PTTL, replace our value in
-- the lock key with the readers' mark (same PTTL) and publish a release notice, so that
-- waiting readers wake. The data epoch and the cluster record are checked by the preamble
-- as for every lock script.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] writer key, KEYS[3] owner record, KEYS[4] reader index, KEYS[5] our reader key
-- ARGV[3] value, ARGV[4] release channel, ARGV[5] the readers' mark
-- Returns {1 converted | 0 missing | -1 held by another value, epoch, false}; or
--          the preamble's -2
local current = value(KEYS[2])
if current == false then
  return {0, epoch, false}
elseif current ~= ARGV[3] then
  return {-1, epoch, false}
end
local left = redis.call('PTTL', KEYS[2])
if left <= 0 then
  return {0, epoch, false}
end
redis.call('SET', KEYS[5], ARGV[3], 'PX', left)
redis.call('SADD', KEYS[4], ARGV[3])
if redis.call('PTTL', KEYS[4]) < left then
  redis.call('PEXPIRE', KEYS[4], left)
end
redis.call('SET', KEYS[2], ARGV[5], 'PX', left)
if redis.call('HGET', KEYS[3], 'value') == ARGV[3] then
  redis.call('HDEL', KEYS[3], 'value', 'client', 'host', 'pid', 'label', 'acquired_ms', 'token')
end
redis.call('PUBLISH', ARGV[4], KEYS[2])
return {1, epoch, false}
