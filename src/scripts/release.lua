-- Compare-and-delete: delete KEYS[1] (and its owner record KEYS[2]) only if it still holds
-- our value ARGV[1]; then hand the lock to the live head of its waiter queue KEYS[3]: the
-- key is set to the waiter's id, with the waiter's own TTL, and the waiter alone is
-- notified on its channel. Without a live waiter, publish a release notice on channel
-- ARGV[2] for every waiter (docs/design.md §6, §17). The released value leaves the queue
-- if it is a waiter's id.
-- ARGV[3] the prefix of the waiters' liveness keys (followed by a waiter's id).
-- Returns 1 deleted, 0 missing, -1 held by another value.
local function live_head()
  for _ = 1, 64 do
    local m = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not m then return nil end
    if redis.call('EXISTS', ARGV[3] .. m) == 1 then return m end
    redis.call('ZREM', KEYS[3], m)
  end
  return nil
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('HGET', KEYS[2], 'value') == ARGV[1] then
    redis.call('DEL', KEYS[2])
  end
  -- A value that is a waiter's id (a key handed to it, released by an operator's
  -- force-unlock) takes the waiter out of the queue, as dequeue.lua does: the key is
  -- never handed straight back to it. A lease value is never a member: no-op.
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('DEL', ARGV[3] .. ARGV[1])
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
elseif current == false then
  return 0
end
return -1
