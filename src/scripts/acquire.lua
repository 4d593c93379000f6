-- Acquire with the master's data epoch (restart quarantine) and, optionally, the fence
-- counter (fencing tokens). The lock key is set exactly as by `SET key value NX PX ttl`.
-- KEYS[1] lock key, KEYS[2] epoch record, KEYS[3] fence counter
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch,
-- ARGV[4] fence: '0' ignore, '1' read
-- Returns {granted 1|0, epoch record, server time us, fence counter or false,
--          holder's pttl or -3}
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[3] .. ':' .. now
  redis.call('SET', KEYS[2], epoch)
end
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local fence = false
if ARGV[4] == '1' then
  fence = redis.call('GET', KEYS[3])
end
local pttl = -3
if not ok then
  pttl = redis.call('PTTL', KEYS[1])
end
return {ok and 1 or 0, epoch, now, fence, pttl}
