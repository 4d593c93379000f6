-- PLANTED BUG (Mutant::SemaphoreCountPerMaster, tests only): each master counts the
-- permits it holds and grants while that count stays within the limit; the client grants
-- on a majority. Three clients can then each hold a majority of masters with every master
-- at its limit (N = 3, L = 2: {a, b}, {b, c}, {c, a}). docs/design.md §15.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2 ..] this attempt's permit keys
-- ARGV[3] value, ARGV[4] ttl ms, ARGV[5] the limit, ARGV[6] the pattern of every permit key
-- Returns as semaphore.lua.
local held = #redis.call('KEYS', ARGV[6])
if held + #KEYS - 1 > tonumber(ARGV[5]) then
  return {0, epoch, false, -3, {}, false}
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], ARGV[3], 'PX', ARGV[4])
end
return {1, epoch, false, -3, {}, false}
