-- Compare-and-delete: delete KEYS[1] only if it still holds our value ARGV[1], with the
-- owner record KEYS[3] where it is that value's (a read-write lock's writer, a semaphore's
-- permit: the mark of their kind goes with the key); then hand the lock to the live head
-- of its waiter queue KEYS[2]: the key is set to the waiter's id, with the waiter's own
-- TTL, and the waiter alone is notified on its channel (`hand_on`). Without a known live
-- waiter, publish a release notice on channel ARGV[2] (docs/design.md §6, §17). The
-- released value leaves the queue if it is a waiter's id.
-- A plain lock's lease (ARGV[4] '1') skips the owner record and the queue's removal: its
-- value has no owner record (a lock's holder record is per client) and is never a
-- waiter's id, so both are no-ops for it. Its release then costs what compare-and-delete,
-- the queue's EXISTS and the notice cost. Any other value (a writer's, a permit's, an
-- operator's force-unlock of a value it read, which may be a waiter's id) takes both.
-- KEYS[4] the queue's ticket counter; ARGV[3] the prefix of the waiters' liveness keys
-- (followed by a waiter's id); ARGV[4] '1' for a plain lock's lease value (else '0' or
-- absent).
-- Returns 1 deleted, 0 missing, -1 held by another value; {1, ticket counter} deleted and
-- handed to the live head of the queue.
local current = value(KEYS[1])
if current == ARGV[1] then
  -- Deleted first: besides freeing the key, a script's first write is what lets its later
  -- ones (the hand-off's `SET`) run on a master over `maxmemory`, where a release is what
  -- frees memory.
  redis.call('DEL', KEYS[1])
  local plain = ARGV[4] == '1'
  if not plain and redis.call('TYPE', KEYS[3])['ok'] == 'hash'
      and redis.call('HGET', KEYS[3], 'value') == ARGV[1] then
    redis.call('DEL', KEYS[3])
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('PUBLISH', ARGV[2], KEYS[1])
    return 1
  end
  -- A value that is a waiter's id (a key handed to it, released by an operator's
  -- force-unlock) takes the waiter out of the queue, as dequeue.lua does: the key is
  -- never handed straight back to it. A lease value is never a member: no-op.
  if not plain then
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('DEL', ARGV[3] .. ARGV[1])
  end
  if hand_on(KEYS[1], KEYS[2], ARGV[3], ARGV[2]) then
    -- Handed to a waiter: the releasing client's next acquire of the name would be
    -- refused, so it may queue at once, with a ticket above this counter (§17).
    return {1, redis.call('GET', KEYS[4]) or '0'}
  end
  return 1
elseif current == false then
  return 0
end
return -1
