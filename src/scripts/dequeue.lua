-- A waiter leaves the queue of a lock: removes waiter ARGV[1] from the queue KEYS[2] and
-- deletes its liveness key KEYS[3]; if the lock key KEYS[1] was handed to it, deletes it
-- and hands the lock on to the next live waiter exactly as `release.lua` does (or, with
-- none, publishes the release notice on ARGV[2]) (docs/design.md §17).
-- ARGV[3] the prefix of the waiters' liveness keys (followed by a waiter's id).
-- Returns 1 when a handed key was passed on, 0 otherwise.
local function live_head()
  for _ = 1, 64 do
    local m = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not m then return nil end
    if redis.call('EXISTS', ARGV[3] .. m) == 1 then return m end
    redis.call('ZREM', KEYS[2], m)
  end
  return nil
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local head = live_head()
if head then
  local live = redis.call('GET', ARGV[3] .. head)
  if live then
    local ttl, channel = string.match(live, '^(%d+) (.*)$')
    redis.call('SET', KEYS[1], head, 'PX', ttl)
    redis.call('PUBLISH', channel, head)
  end
else
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
