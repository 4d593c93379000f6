-- Writes the cluster record KEYS[1] unless one exists (bootstrap, or re-admission of a
-- master that lost its data). With ARGV[1] non-empty (the run_id a survey read on this
-- connection) it is a bootstrap: the record then also names this process and its data
-- epoch KEYS[2], which must still be ARGV[2], the epoch the survey read. Restart quarantine
-- lets that process vote at once, since it was checked empty; a new epoch means its data
-- was lost since, and nothing is written. ARGV[3..] field, value, ...
-- Returns {1 written | 0 a record exists | -1 the epoch changed since the survey,
--          the record's fingerprint or ''}
local existing = redis.call('HGET', KEYS[1], 'fingerprint')
if existing then
  return {0, existing}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, ''}
end
if ARGV[1] ~= '' then
  local epoch = redis.call('GET', KEYS[2])
  local id = epoch and string.match(epoch, '^(.*):[^:]*$')
  if id ~= ARGV[2] then
    return {-1, ''}
  end
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'bootstrap_run_id', ARGV[1], 'bootstrap_epoch', ARGV[2])
end
return {1, redis.call('HGET', KEYS[1], 'fingerprint')}
