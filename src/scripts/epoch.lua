-- The data epoch (restart quarantine, docs/design.md §7): the first part of the preamble
-- that every lock script starts with, joined in front of it at compile time
-- (`scripts/mod.rs`), and the start of the script that reads the epoch at connect. Reads
-- the master's epoch record, started where it is missing (new or lost data). Only a new
-- epoch reads the server's time (its creation time): the age of an epoch is read at
-- connect, so a lock script's success path costs one `GET` here.
-- KEYS[1] epoch record; ARGV[1] id for a new epoch ('' not to read the epoch)
-- Sets `epoch` (the record "<id>:<created us>", or false when not read).
local epoch = false
if ARGV[1] ~= '' then
  epoch = redis.call('GET', KEYS[1])
  if not epoch then
    local t = redis.call('TIME')
    epoch = ARGV[1] .. ':' .. t[1] .. string.format('%06d', t[2])
    redis.call('SET', KEYS[1], epoch)
  end
end
