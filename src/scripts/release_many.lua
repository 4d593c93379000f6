-- Compare-and-delete of every key of a lease over several keys: delete each lock key
-- that still holds our value ARGV[1] (with its owner record where it is that value's, as
-- `release.lua` does), then hand it to the live head of
-- its waiter queue as `release.lua` does (`hand_on`), or, without one, publish a release
-- notice for it on its channel. Keys that expired or hold another value are left alone.
-- KEYS[1..] per lock: lock key, waiter queue, owner record; ARGV[1] value, then per lock,
-- in the order of the keys: its release channel, the prefix of its waiters' liveness keys.
-- Returns {keys deleted, keys missing, keys held by another value}
local deleted, missing, held = 0, 0, 0
for i = 1, #KEYS, 3 do
  local n = (i - 1) / 3
  local current = value(KEYS[i])
  if current == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if redis.call('TYPE', KEYS[i + 2])['ok'] == 'hash'
        and redis.call('HGET', KEYS[i + 2], 'value') == ARGV[1] then
      redis.call('DEL', KEYS[i + 2])
    end
    hand_on(KEYS[i], KEYS[i + 1], ARGV[2 * n + 3], ARGV[2 * n + 2])
    deleted = deleted + 1
  elseif current == false then
    missing = missing + 1
  else
    held = held + 1
  end
end
return {deleted, missing, held}
