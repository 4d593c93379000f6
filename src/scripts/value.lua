-- The value of a lock key, for the scripts that compare it with a holder's own: joined
-- in front of each at compile time (`scripts/sources.rs`). Under the name there may be a key
-- of another type (another application's, or one a user wrote there), and `GET` fails on
-- it: it holds no value of any holder's, so it reads as another value, never as the
-- script's error (docs/design.md §4).
--
-- value(key): the string `key` holds; false where it is missing; true where it holds a
-- value of another type (which equals no value and is not false). `GET` failing for
-- another reason (a user not allowed to read the key) is the script's error.
local function value(key)
  local current = redis.pcall('GET', key)
  if type(current) == 'table' then
    if not string.find(current.err, 'WRONGTYPE', 1, true) then
      -- Read again to fail with the server's own error (a raised table loses it before
      -- Redis 7).
      return redis.call('GET', key)
    end
    return true
  end
  return current
end
