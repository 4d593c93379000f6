-- Acquire as a queued waiter or a fair contender (docs/design.md §17): `acquire.lua`'s
-- checks and answer, but the key may be taken where it is free or handed to waiter
-- ARGV[10], and a fair acquire (ARGV[11] '1') only where no other live waiter is ahead.
-- The value is set with the lease's own TTL, never keeping a handed key's expiry.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] lock key, KEYS[3] fence counter, KEYS[4] owner record (another kind's), KEYS[5] waiter queue,
-- KEYS[6] ticket counter, KEYS[7] the holder record (`holder.lua`)
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label, ARGV[10] waiter id ('' for none),
-- ARGV[11] fair, ARGV[12] the prefix of the waiters' liveness keys
-- Returns {code, epoch record, fence counter or false,
--          holder's pttl, -3 granted or -2 free but queued behind a live waiter,
--          detail or false, ticket counter (fair) or false}
-- code: as `acquire.lua`'s
-- `GET` fails on a key of another type: only then is its `TYPE` read. Any other failure
-- (a user not allowed to read the key) is the script's error, not another kind.
local current = redis.pcall('GET', KEYS[2])
if type(current) == 'table' then
  if not string.find(current.err, 'WRONGTYPE', 1, true) then
    return current
  end
  return {-3, epoch, false, -3, redis.call('TYPE', KEYS[2])['ok'], false}
end
local waiter = ARGV[10]
local ok = current == false or (waiter ~= '' and current == waiter)
if not ok then
  -- Another value: only here can the name be another kind's (a read-write lock keeps its
  -- writer's value or its readers' mark under it, docs/design.md §16).
  local owned = redis.call('HGET', KEYS[4], 'kind')
  if owned and owned ~= 'lock' then
    return {-3, epoch, false, -3, owned, false}
  end
end
local queued = false
if ok and ARGV[11] == '1' then
  -- A head the prune budget did not reach (nil) may be an earlier live waiter: refused.
  local head = live_head(KEYS[5], ARGV[12])
  if head == nil or (head and head ~= waiter) then
    ok = false
    queued = true
  end
end
local fence = false
if ARGV[5] == '1' then
  fence = redis.call('GET', KEYS[3])
end
local ticket = false
if ARGV[11] == '1' then
  ticket = redis.call('GET', KEYS[6]) or '0'
end
local pttl = -3
if ok then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  hold(KEYS[7], ARGV[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
  if waiter ~= '' then
    redis.call('ZREM', KEYS[5], waiter)
    redis.call('DEL', ARGV[12] .. waiter)
  end
elseif queued then
  pttl = -2
else
  pttl = redis.call('PTTL', KEYS[2])
end
return {ok and 1 or 0, epoch, fence, pttl, false, ticket}
