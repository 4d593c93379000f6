-- Extend a read lease of a read-write lock (docs/design.md §16): `extend.lua` on the
-- reader's own key, and, where it was extended, the reader index kept alive at least as
-- long (with the reader in it), so that a writer's script always finds a live reader, and
-- the owner record (its kind 'rwlock') and the readers' mark in the lock key kept alive at
-- least as long, so that no plain mutex takes the name while the reader holds it. A lock
-- key holding a value (a writer's) is not extended over: that master keeps no reader.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, '' not to read the epoch, ARGV[2] the
-- caller's cluster fingerprint):
-- KEYS[2] reader key, KEYS[3] reader index, KEYS[4] owner record, KEYS[5] the lock key;
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] the readers' mark
-- Returns as `extend.lua`: {1 extended | 0 missing | -1 held by another value, epoch or
-- false, false}; or the preamble's -2
local current = redis.call('GET', KEYS[2])
if current == ARGV[3] then
  local lock = value(KEYS[5])
  if lock and lock ~= ARGV[5] then
    return {-1, epoch, false}
  end
  local ttl = tonumber(ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  redis.call('SADD', KEYS[3], ARGV[3])
  if redis.call('PTTL', KEYS[3]) < ttl then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
  redis.call('HSET', KEYS[4], 'kind', 'rwlock')
  if redis.call('PTTL', KEYS[4]) < ttl then
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
  end
  if redis.call('PTTL', KEYS[5]) < ttl then
    redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[4])
  end
  return {1, epoch, false}
elseif current == false then
  return {0, epoch, false}
end
return {-1, epoch, false}
