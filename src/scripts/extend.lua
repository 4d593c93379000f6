-- Compare-and-PEXPIRE: reset the TTL of KEYS[1] to ARGV[2] ms if it holds our value ARGV[1].
-- When the key is missing (the master restarted or the key expired there early) it is set
-- again: the caller extends only while its lease is valid, so no other client can hold a
-- quorum, and a key someone else set is never touched.
-- Returns 1 extended, 2 set again, -1 held by another value.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return -1
