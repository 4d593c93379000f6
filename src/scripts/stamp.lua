-- Writes the cluster record KEYS[1] unless one exists (bootstrap, or re-admission of a
-- master that lost its data). The key also holds the master's data epoch (field `epoch`,
-- `epoch.lua`), which is no record: a hash holding only that has none. With ARGV[1]
-- non-empty (the run_id a survey read on this connection) it is a bootstrap: the record
-- then also names this process and its data epoch, which must still be ARGV[2], the epoch
-- the survey read. Restart quarantine lets that process vote at once, since it was
-- checked empty; a new epoch means its data was lost since, and nothing is written.
-- ARGV[3..] field, value, ...
-- Returns {1 written | 0 a record exists | -1 the epoch changed since the survey,
--          the record's fingerprint or ''}
local found = redis.call('HMGET', KEYS[1], 'fingerprint', 'epoch')
local existing, epoch = found[1], found[2]
if existing then
  return {0, existing}
end
if redis.call('HLEN', KEYS[1]) > (epoch and 1 or 0) then
  return {0, ''}
end
if ARGV[1] ~= '' then
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
