-- Fencing write-back (phase 2): raise the fence counter to the token T, only where the
-- lock still holds our value and only if the counter is below T (strictly increasing);
-- the owner record then shows the token.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] the cluster record (its data epoch), KEYS[4] owner record
-- ARGV[1] value, ARGV[2] T
-- Returns {1 written | 0 conflict | -1 not ours, counter before or false, epoch record}
local epoch = redis.call('HGET', KEYS[3], 'epoch') or false
if value(KEYS[1]) ~= ARGV[1] then
  return {-1, false, epoch}
end
local before = redis.call('GET', KEYS[2])
local c = tonumber(before or '0')
local t = tonumber(ARGV[2])
if c < t then
  redis.call('SET', KEYS[2], ARGV[2])
  if redis.call('HGET', KEYS[4], 'value') == ARGV[1] then
    redis.call('HSET', KEYS[4], 'token', ARGV[2])
  end
  return {1, before or false, epoch}
end
return {0, before, epoch}
