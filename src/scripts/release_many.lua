-- Compare-and-delete of every key of a lease over several keys: delete each lock key (and
-- its owner record) that still holds our value ARGV[1], and publish a release notice for
-- it on its channel, for waiters. Keys that expired or hold another value are left alone.
-- KEYS[1..] lock key, owner record, ...; ARGV[1] value, ARGV[2..] each lock key's channel,
-- in the order of the keys.
-- Returns {keys deleted, keys missing, keys held by another value}
local deleted, missing, held = 0, 0, 0
for i = 1, #KEYS, 2 do
  local current = redis.call('GET', KEYS[i])
  if current == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if redis.call('HGET', KEYS[i + 1], 'value') == ARGV[1] then
      redis.call('DEL', KEYS[i + 1])
    end
    redis.call('PUBLISH', ARGV[(i + 1) / 2 + 1], KEYS[i])
    deleted = deleted + 1
  elseif current == false then
    missing = missing + 1
  else
    held = held + 1
  end
end
return {deleted, missing, held}
