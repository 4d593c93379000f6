-- A waiter leaves the queue of a lock: removes waiter ARGV[1] from the queue KEYS[2] and
-- deletes its liveness key KEYS[3]; if the lock key KEYS[1] was handed to it, deletes it
-- and hands the lock on to the next live waiter exactly as `release.lua` does (or, with
-- none, publishes the release notice on ARGV[2]) (docs/design.md §17).
-- ARGV[3] the prefix of the waiters' liveness keys (followed by a waiter's id).
-- Returns 1 when a handed key was passed on, 0 otherwise.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
if value(KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
hand_on(KEYS[1], KEYS[2], ARGV[3], ARGV[2])
return 1
