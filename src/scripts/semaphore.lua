-- Take permits of a semaphore (docs/design.md §15): set k chosen slot keys, each as by
-- `SET slot value NX PX ttl`, all of them or none, after the same data epoch and cluster
-- record checks as acquire.lua, and after checking the semaphore's stored limit.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] the semaphore's limit record, KEYS[3 .. 2 + limit] the slot keys 0 .. limit - 1
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] fence: '0' ignore, '1' read, ARGV[6] client id,
-- ARGV[7] host, ARGV[8] process id, ARGV[9] label, ARGV[10] the limit,
-- ARGV[11] the slot keys' common beginning (slot i is that followed by i),
-- ARGV[12] 'take' (take the wanted slots) or 'limit' (store the limit, take nothing),
-- ARGV[13 ..] the wanted slots (0-based, distinct, below the limit)
-- Returns {code, epoch record, fence counters of the wanted slots ('' for
--          none) or false, pttl after which enough slots are free here or -3,
--          the free slots here (0-based), detail or false}
-- code: 1 granted every wanted slot ('limit': the record holds the limit now), 0 some
-- wanted slot is held ('limit': a permit is live here under the stored limit, detail: that
-- limit), -4 ('take') the stored limit is another (detail: that limit); or the preamble's
-- -2
-- The limit record has no TTL. A 'take' writes it only where it is missing and is refused
-- wherever it differs; only a 'limit' rewrites it, and only while no permit is live on
-- this master: every live slot key lies below the recorded limit, so checking those slots
-- suffices (docs/design.md §15).
local limit = tonumber(ARGV[10])
local stored = tonumber(redis.call('GET', KEYS[2]) or '')
if ARGV[12] == 'limit' then
  if stored ~= limit then
    if stored then
      for i = 0, math.min(stored, 64) - 1 do
        if redis.call('EXISTS', ARGV[11] .. i) == 1 then
          return {0, epoch, false, -3, {}, tostring(stored)}
        end
      end
    end
    redis.call('SET', KEYS[2], ARGV[10])
  end
  return {1, epoch, false, -3, {}, false}
end
if not stored then
  redis.call('SET', KEYS[2], ARGV[10])
elseif stored ~= limit then
  return {-4, epoch, false, -3, {}, tostring(stored)}
end
local free = {}
local held = {}
for i = 1, limit do
  local pttl = redis.call('PTTL', KEYS[2 + i])
  if pttl == -2 then
    free[#free + 1] = i - 1
  else
    held[#held + 1] = pttl
  end
end
local wanted = #ARGV - 12
for j = 13, #ARGV do
  if redis.call('EXISTS', KEYS[3 + tonumber(ARGV[j])]) == 1 then
    local short = wanted - #free
    local wait = -3
    if short > 0 then
      table.sort(held)
      wait = held[short] or -3
    end
    return {0, epoch, false, wait, free, false}
  end
end
local fences = {}
local t = redis.call('TIME')
local ms = t[1] .. string.format('%03d', math.floor(t[2] / 1000))
for j = 13, #ARGV do
  local slot = KEYS[3 + tonumber(ARGV[j])]
  local owner = 'redquorum:owner:' .. slot
  redis.call('SET', slot, ARGV[3], 'PX', ARGV[4])
  redis.call('DEL', owner)
  redis.call('HSET', owner, 'kind', 'permit', 'value', ARGV[3], 'client', ARGV[6],
    'host', ARGV[7], 'pid', ARGV[8], 'label', ARGV[9], 'acquired_ms', ms)
  redis.call('PEXPIRE', owner, ARGV[4])
  if ARGV[5] == '1' then
    fences[#fences + 1] = redis.call('GET', 'redquorum:fence:' .. slot) or ''
  end
end
return {1, epoch, ARGV[5] == '1' and fences or false, -3, free, false}
