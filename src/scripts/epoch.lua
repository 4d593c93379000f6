-- Reads the master's data epoch, creating it when missing (new or lost data).
-- KEYS[1] epoch record; ARGV[1] id for a new epoch.
-- Returns {epoch record "<id>:<created us>", server time us}
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
end
return {epoch, now}
