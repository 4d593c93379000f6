-- Compare-and-PEXPIRE: reset the TTL of KEYS[1] to ARGV[2] ms if it holds our value ARGV[1].
-- When the key is missing (the master restarted or the key expired there early) it is set
-- again: the caller extends only while its lease is valid, so no other client can hold a
-- quorum, and a key someone else set is never touched.
-- With ARGV[3] (an id for a new epoch) non-empty, also reads the data epoch KEYS[2],
-- starting a new one if it is missing (restart quarantine).
-- Returns {1 extended | 2 set again | -1 held by another value, epoch or false, time us}
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
local code = -1
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  code = 1
elseif current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  code = 2
end
return {code, epoch, now}
