-- The data epoch (restart quarantine, docs/design.md §7): the first part of the preamble
-- that every lock script starts with, joined in front of it at compile time
-- (`scripts/mod.rs`), and alone the script that reads the epoch at connect. Reads the
-- server's time, and the master's epoch record, started where it is missing (new or
-- lost data).
-- KEYS[1] epoch record; ARGV[1] id for a new epoch ('' not to read the epoch)
-- Sets `t` (TIME), `now` (server time us) and `epoch` (the record "<id>:<created us>",
-- or false when not read).
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = false
if ARGV[1] ~= '' then
  epoch = redis.call('GET', KEYS[1])
  if not epoch then
    epoch = ARGV[1] .. ':' .. now
    redis.call('SET', KEYS[1], epoch)
  end
end
