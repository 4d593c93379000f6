-- The cluster record's check (docs/design.md §11): the second part of the preamble, after
-- `epoch.lua`, which read the record's fingerprint (`recorded`). A caller whose cluster
-- fingerprint is not the master's record's, or that knows a record the master lacks, is
-- refused before the script touches anything.
-- ARGV[2] the caller's cluster fingerprint ('' when it knows no record)
-- Returns {-2, epoch record or false, the record's fingerprint or false}
if (recorded or '') ~= ARGV[2] then
  return {-2, epoch, recorded}
end
