-- PLANTED BUG (Mutant::SemaphoreCountPerMaster, tests only): each master counts the
-- permits it holds and grants while that count stays within the limit; the client grants
-- on a majority. Three clients can then each hold a majority of masters with every master
-- at its limit (N = 3, L = 2: {a, b}, {b, c}, {c, a}). docs/design.md §15.
-- KEYS[1] epoch record, KEYS[2] cluster record, KEYS[3 ..] this attempt's permit keys
-- ARGV[1] value, ARGV[2] ttl ms, ARGV[3] id for a new epoch, ARGV[4] the caller's cluster
-- fingerprint, ARGV[5] the limit, ARGV[6] the pattern of every permit key
-- Returns as semaphore.lua.
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[3] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
end
local recorded = redis.call('HGET', KEYS[2], 'fingerprint')
if (recorded or '') ~= ARGV[4] then
  return {-2, epoch, now, false, -3, {}, recorded}
end
local held = #redis.call('KEYS', ARGV[6])
if held + #KEYS - 2 > tonumber(ARGV[5]) then
  return {0, epoch, now, false, -3, {}, false}
end
for i = 3, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, epoch, now, false, -3, {}, false}
