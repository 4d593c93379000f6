-- Force-unlock, an operator's tool: delete the lock key KEYS[1] whatever value it holds,
-- with its owner record KEYS[2], raise the fence counter KEYS[3] by one, and where a lock
-- was deleted hand it to the live head of its waiter queue KEYS[4] as `release.lua` does
-- (`hand_on`; ARGV[2] the prefix of the waiters' liveness keys), or publish a release
-- notice on channel ARGV[1]. A value that is a waiter's id (a key handed to a queued
-- waiter) takes that waiter out of the queue first, so that the key is never handed
-- straight back to it. Another kind of lock under the name (a key of another type, a
-- string whose owner record names another kind, or the readers' mark ARGV[3] of a
-- read-write lock, with or without its record) is left alone, and so is its counter.
-- Returns {1 deleted | 0 missing | -3 another kind of lock,
--          the value deleted, or that kind, or false, the fence counter after the raise or false}
local kind = redis.call('TYPE', KEYS[1])['ok']
local owned = false
if redis.call('TYPE', KEYS[2])['ok'] == 'hash' then
  owned = redis.call('HGET', KEYS[2], 'kind')
end
if kind ~= 'none' and kind ~= 'string' then
  return {-3, owned or kind, false}
end
if kind == 'string' and owned and owned ~= 'lock' then
  return {-3, owned, false}
end
-- The key is deleted first: besides freeing it, a script's first write is what lets its
-- later ones (the counter's INCR, the hand-off's SET) run on a master over `maxmemory`,
-- where an operator unlocks to free memory.
local value = false
if kind == 'string' then
  value = redis.call('GET', KEYS[1])
  if value == ARGV[3] then
    return {-3, 'rwlock', false}
  end
  redis.call('DEL', KEYS[1])
end
local counter = redis.call('INCR', KEYS[3])
if owned == 'lock' then
  redis.call('DEL', KEYS[2])
end
if not value then
  return {0, false, counter}
end
redis.call('ZREM', KEYS[4], value)
redis.call('DEL', ARGV[2] .. value)
hand_on(KEYS[1], KEYS[4], ARGV[2], ARGV[1])
return {1, value, counter}
