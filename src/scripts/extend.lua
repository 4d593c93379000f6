-- Compare-and-PEXPIRE: reset the TTL of the lock key if it holds our value, and keep the
-- holder record (`holder.lua`) alive at least as long, and the owner record of another
-- kind (a read-write lock's writer, a semaphore's permit) as long, where it is this
-- value's: it marks the name as that kind's for as long as the key lives (docs/design.md
-- §16). A missing key is never set again: it may have been force-unlocked, and setting it
-- would undo that.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, '' not to read the epoch, ARGV[2] the
-- caller's cluster fingerprint):
-- KEYS[2] lock key, KEYS[3] the holder record, KEYS[4] the owner record; ARGV[3] value,
-- ARGV[4] ttl ms
-- Returns {1 extended | 0 missing | -1 held by another value, epoch or false,
--          false}; or the preamble's -2
local current = value(KEYS[2])
if current == ARGV[3] then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  local held = redis.call('PTTL', KEYS[3])
  if held >= 0 and held < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
  if redis.call('TYPE', KEYS[4])['ok'] == 'hash'
      and redis.call('HGET', KEYS[4], 'value') == ARGV[3] then
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
  end
  return {1, epoch, false}
elseif current == false then
  return {0, epoch, false}
end
return {-1, epoch, false}
