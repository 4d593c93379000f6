-- Acquire with the master's data epoch (restart quarantine), the cluster record and,
-- optionally, the fence counter (fencing tokens). The lock key is set exactly as by
-- `SET key value NX PX ttl`. Who holds it is found from the value, which names its
-- client's holder record (`holder.lua`, docs/design.md §11): nothing else is written per
-- lock. The kinds are told apart on the refusal path only: `SET NX` refuses a key of any
-- type, and a read-write lock keeps a key under its name as long as anyone holds it (the
-- writer's value, or the readers' mark, docs/design.md §16).
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] lock key, KEYS[3] fence counter, KEYS[4] owner record (another kind's),
-- KEYS[5] ticket counter of the lock's waiter queue, KEYS[6] the holder record
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label
-- Returns {1, epoch record} granted ({1, epoch record, fence counter or false} with the
-- fence read): a grant's answer is as short as the mechanism's, which the client parses
-- on every master; otherwise {code, epoch record, fence counter or false,
--          holder's pttl or -3, detail or false, ticket counter (refused) or false}
-- code: 1 granted, 0 held by another value, -3 the name holds another kind of lock
-- (detail: its kind); or the preamble's -2. Only a refusal reads the ticket counter (0
-- when missing): a waiter's place in the queue is one above it (docs/design.md §17).
local ok = redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4])
if ok then
  hold(KEYS[6], ARGV[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
  if ARGV[5] == '1' then
    return {1, epoch, redis.call('GET', KEYS[3])}
  end
  return {1, epoch}
end
-- Refused: only here can the name be another kind's, a key of another type or a string
-- that another kind's owner record claims (a writer's value, the readers' mark).
local kind = redis.call('TYPE', KEYS[2])['ok']
local owned = redis.call('HGET', KEYS[4], 'kind')
if owned == 'lock' then
  owned = false
end
if kind ~= 'string' or owned then
  return {-3, epoch, false, -3, owned or kind, false}
end
local fence = false
if ARGV[5] == '1' then
  fence = redis.call('GET', KEYS[3])
end
return {0, epoch, fence, redis.call('PTTL', KEYS[2]), false, redis.call('GET', KEYS[5]) or '0'}
