-- Acquire as a queued waiter or a fair contender (docs/design.md §17): `acquire.lua`'s
-- preamble and answer, but the key may be taken where it is free or handed to waiter
-- ARGV[10], and a fair acquire (ARGV[11] '1') only where no other live waiter is ahead.
-- The value is set with the lease's own TTL, never keeping a handed key's expiry.
-- KEYS[1] lock key, KEYS[2] epoch record, KEYS[3] fence counter, KEYS[4] cluster record,
-- KEYS[5] owner record, KEYS[6] waiter queue, KEYS[7] ticket counter
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch, ARGV[4] fence: '0' ignore,
-- '1' read, ARGV[5] the caller's cluster fingerprint, ARGV[6] client id, ARGV[7] host,
-- ARGV[8] process id, ARGV[9] label, ARGV[10] waiter id ('' for none), ARGV[11] fair,
-- ARGV[12] the prefix of the waiters' liveness keys
-- Returns {code, epoch record, server time us, fence counter or false,
--          holder's pttl, -3 granted or -2 free but queued behind a live waiter,
--          detail or false, ticket counter (fair) or false}
-- code: as `acquire.lua`'s
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[3] .. ':' .. now
  redis.call('SET', KEYS[2], epoch)
end
local recorded = redis.call('HGET', KEYS[4], 'fingerprint')
if (recorded or '') ~= ARGV[5] then
  return {-2, epoch, now, false, -3, recorded, false}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return {-3, epoch, now, false, -3, kind, false}
end
local owned = redis.call('HGET', KEYS[5], 'kind')
if owned and owned ~= 'lock' then
  return {-3, epoch, now, false, -3, owned, false}
end
local waiter = ARGV[10]
local current = redis.call('GET', KEYS[1])
local ok = current == false or (waiter ~= '' and current == waiter)
local queued = false
if ok and ARGV[11] == '1' then
  -- A head the prune budget did not reach (nil) may be an earlier live waiter: refused.
  local head = live_head(KEYS[6], ARGV[12])
  if head == nil or (head and head ~= waiter) then
    ok = false
    queued = true
  end
end
local fence = false
if ARGV[4] == '1' then
  fence = redis.call('GET', KEYS[3])
end
local ticket = false
if ARGV[11] == '1' then
  ticket = redis.call('GET', KEYS[7]) or '0'
end
local pttl = -3
if ok then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'kind', 'lock', 'value', ARGV[1], 'client', ARGV[6],
    'host', ARGV[7], 'pid', ARGV[8], 'label', ARGV[9],
    'acquired_ms', t[1] .. string.format('%03d', math.floor(t[2] / 1000)))
  redis.call('PEXPIRE', KEYS[5], ARGV[2])
  if waiter ~= '' then
    redis.call('ZREM', KEYS[6], waiter)
    redis.call('DEL', ARGV[12] .. waiter)
  end
elseif queued then
  pttl = -2
else
  pttl = redis.call('PTTL', KEYS[1])
end
return {ok and 1 or 0, epoch, now, fence, pttl, false, ticket}
