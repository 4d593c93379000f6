-- Compare-and-delete: delete KEYS[1] (and its owner record KEYS[2]) only if it still holds
-- our value ARGV[1], and publish a release notice on channel ARGV[2] for waiters.
-- Returns 1 deleted, 0 missing, -1 held by another value.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('HGET', KEYS[2], 'value') == ARGV[1] then
    redis.call('DEL', KEYS[2])
  end
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
elseif current == false then
  return 0
end
return -1
