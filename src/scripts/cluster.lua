-- The cluster record's check (docs/design.md §11): the second part of the preamble, after
-- `epoch.lua`. A caller whose cluster fingerprint is not the master's record's, or that
-- knows a record the master lacks, is refused before the script touches anything.
-- KEYS[2] cluster record; ARGV[2] the caller's cluster fingerprint ('' when it knows no
-- record)
-- Returns {-2, epoch record or false, the record's fingerprint or false}
local recorded = redis.call('HGET', KEYS[2], 'fingerprint')
if (recorded or '') ~= ARGV[2] then
  return {-2, epoch, recorded}
end
