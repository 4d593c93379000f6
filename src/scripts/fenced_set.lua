-- Storage-side fencing check: apply `SET KEYS[1] ARGV[1]` only if the token ARGV[2] is not
-- older than the newest token seen for this key (kept in KEYS[2]); remember it.
-- Returns 1 applied, 0 rejected (a newer holder has written since).
local newest = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < newest then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
