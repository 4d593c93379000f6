-- The data epoch (restart quarantine, docs/design.md §7): the first part of the preamble
-- that every lock script starts with, joined in front of it at compile time
-- (`scripts/sources.rs`), and the start of the script that reads the epoch at connect. Reads
-- the cluster record, which holds the master's data epoch beside the cluster's fields
-- (docs/design.md §11), with one command, and starts the epoch where it is missing (new or
-- lost data). Only a new epoch reads the server's time (its creation time): the age of an
-- epoch is read at connect, so a lock script's success path costs one `HMGET` here for
-- the epoch and the cluster record's check (`cluster.lua`) together.
-- KEYS[1] the cluster record; ARGV[1] id for a new epoch ('' not to read the epoch)
-- Sets `epoch` (its field, "<id>:<created us>", or false when not read) and `recorded`
-- (the record's fingerprint, or false without a record).
local record = redis.call('HMGET', KEYS[1], 'epoch', 'fingerprint')
local epoch, recorded = false, record[2]
if ARGV[1] ~= '' then
  epoch = record[1]
  if not epoch then
    local t = redis.call('TIME')
    epoch = ARGV[1] .. ':' .. t[1] .. string.format('%06d', t[2])
    redis.call('HSET', KEYS[1], 'epoch', epoch)
  end
end
