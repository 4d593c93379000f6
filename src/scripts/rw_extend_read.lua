-- Extend a read lease of a read-write lock (docs/design.md §16): `extend.lua` on the
-- reader's own key, and, where it was extended, the reader index kept alive at least as
-- long (with the reader in it), so that a writer's script always finds a live reader, and
-- the owner record (its kind 'rwlock') kept alive at least as long, so that no plain mutex
-- takes the name while the reader holds it.
-- KEYS[1] reader key, KEYS[2] epoch record, KEYS[3] cluster record, KEYS[4] reader index,
-- KEYS[5] owner record
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch ('' not to read it),
-- ARGV[4] the caller's cluster fingerprint
-- Returns as `extend.lua`: {1 extended | 0 missing | -1 held by another value | -2 the
-- cluster record's fingerprint differs, epoch or false, time us, the record's fingerprint
-- or false}
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
  redis.call('SADD', KEYS[4], ARGV[1])
  if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
  redis.call('HSET', KEYS[5], 'kind', 'rwlock')
  if redis.call('PTTL', KEYS[5]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[5], ARGV[2])
  end
  return {1, epoch, now, false}
elseif current == false then
  return {0, epoch, now, false}
end
return {-1, epoch, now, false}
