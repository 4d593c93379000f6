-- Acquire a read-write lock in one mode (docs/design.md §16), with the data epoch, the
-- cluster record and the fence counter read exactly as `acquire.lua` reads them. The lock
-- key holds the writer's value, or, while readers may hold, the readers' mark ARGV[14]
-- (expiring no sooner than any reader): a name held by readers has a key, which `SET NX`
-- refuses, so a mutex's grant need not read the name's kind.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] writer key (the lock key), KEYS[3] fence counter (one per lock, shared by
-- writers and readers), KEYS[4] owner record (kind 'rwlock'), KEYS[5] reader index (a set
-- of reader values), KEYS[6] writer intent, KEYS[7] prefix of the reader keys (a reader's
-- key is this prefix and its value)
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label, ARGV[10] mode: 'r' read, 'w' write,
-- ARGV[11] the writer's intent id (one per acquire call), ARGV[12] intent ttl ms,
-- ARGV[13] the most readers a lock admits, ARGV[14] the readers' mark
-- Returns {code, epoch record, fence counter or false,
--          holder's pttl or -3, detail or false}
-- code: 1 granted, 0 refused (held, or readers present), -3 the name holds another kind
-- of lock (detail: its kind); or the preamble's -2
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return {-3, epoch, false, -3, kind}
end
local owned = redis.call('HGET', KEYS[4], 'kind')
if owned and owned ~= 'rwlock' then
  return {-3, epoch, false, -3, owned}
end
if kind == 'string' and not owned then
  return {-3, epoch, false, -3, 'lock'}
end
-- A writer holds where the key holds anything but the readers' mark.
local writer = kind == 'string' and redis.call('GET', KEYS[2]) ~= ARGV[14]
-- Live readers, pruning the index of those that expired.
local live, longest, shortest = 0, -3, -3
for _, reader in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  local p = redis.call('PTTL', KEYS[7] .. reader)
  if p < 0 then
    redis.call('SREM', KEYS[5], reader)
  else
    live = live + 1
    if p > longest then longest = p end
    if shortest < 0 or p < shortest then shortest = p end
  end
end
local ttl = tonumber(ARGV[4])
local granted = false
local pttl = -3
if ARGV[10] == 'r' then
  local intent = redis.call('PTTL', KEYS[6])
  if writer then
    pttl = redis.call('PTTL', KEYS[2])
  elseif intent > 0 then
    pttl = intent
  elseif live >= tonumber(ARGV[13]) then
    pttl = shortest
  else
    redis.call('SET', KEYS[7] .. ARGV[3], ARGV[3], 'PX', ARGV[4])
    redis.call('SADD', KEYS[5], ARGV[3])
    if redis.call('PTTL', KEYS[5]) < ttl then
      redis.call('PEXPIRE', KEYS[5], ARGV[4])
    end
    if redis.call('PTTL', KEYS[2]) < ttl then
      redis.call('SET', KEYS[2], ARGV[14], 'PX', ARGV[4])
    end
    granted = true
  end
else
  if writer then
    pttl = redis.call('PTTL', KEYS[2])
  elseif live > 0 then
    redis.call('SET', KEYS[6], ARGV[11], 'PX', ARGV[12])
    pttl = longest
  else
    -- No live reader: a readers' mark left behind gives way to the writer.
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
    if redis.call('GET', KEYS[6]) == ARGV[11] then
      redis.call('DEL', KEYS[6])
    end
    granted = true
  end
end
local fence = false
if ARGV[5] == '1' then
  fence = redis.call('GET', KEYS[3])
end
if granted then
  redis.call('HSET', KEYS[4], 'kind', 'rwlock')
  if ARGV[10] == 'w' then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[4], 'value', ARGV[3], 'client', ARGV[6], 'host', ARGV[7],
      'pid', ARGV[8], 'label', ARGV[9],
      'acquired_ms', t[1] .. string.format('%03d', math.floor(t[2] / 1000)))
    -- No live reader stands behind the record: it lives as long as this writer (whose
    -- extensions raise it), so a writer that dies leaves no kind behind its key.
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
  elseif redis.call('PTTL', KEYS[4]) < ttl then
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
  end
end
return {granted and 1 or 0, epoch, fence, pttl, false}
