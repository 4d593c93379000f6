-- Writes the cluster record KEYS[1] unless one exists (bootstrap, or re-admission of a
-- master that lost its data). With ARGV[1] non-empty (the run_id the caller read on this
-- connection) the record also names this process and its data epoch KEYS[2] (created when
-- missing, with id ARGV[2]): restart quarantine lets that process vote at once, since it
-- was checked empty. ARGV[3..] field, value, ...
-- Returns {1 written | 0 a record exists, its fingerprint}
local existing = redis.call('HGET', KEYS[1], 'fingerprint')
if existing then
  return {0, existing}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, ''}
end
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  local now = t[1] .. string.format('%06d', t[2])
  local epoch = redis.call('GET', KEYS[2])
  if not epoch then
    epoch = ARGV[2] .. ':' .. now
    redis.call('SET', KEYS[2], epoch)
  end
  local id = string.match(epoch, '^(.*):[^:]*$') or epoch
  redis.call('HSET', KEYS[1], 'bootstrap_run_id', ARGV[1], 'bootstrap_epoch', id)
end
return {1, redis.call('HGET', KEYS[1], 'fingerprint')}
