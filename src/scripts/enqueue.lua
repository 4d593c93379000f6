-- Registers (or refreshes) a waiter in the queue of a lock (docs/design.md §17), with the
-- master's data epoch (restart quarantine) and the cluster record, as `acquire.lua`. A lock
-- key that is free or handed to a queued waiter then goes to the live head: to this waiter
-- when it heads; otherwise a key handed out of turn (to this waiter or another behind the
-- head) goes on to the head, which is told, and a free key is left to the head.
-- After the preamble (`epoch.lua`, `cluster.lua`: KEYS[1] the cluster record, which holds
-- the data epoch; ARGV[1] id for a new epoch, ARGV[2] the caller's cluster fingerprint):
-- KEYS[2] lock key, KEYS[3] waiter queue, KEYS[4] ticket counter, KEYS[5] the waiter's
-- liveness key, KEYS[6] owner record
-- ARGV[3] waiter id, ARGV[4] score (a ticket), ARGV[5] strict: '1' only for a fair
-- registration's ticket write-back, ARGV[6] waiter ttl ms, ARGV[7] the waiter's hand-off
-- channel, ARGV[8] fair: '1' or '0' (the steps are the same), ARGV[9] the prefix of the
-- waiters' liveness keys
-- Returns {code, epoch record, ticket counter, handed (1/0), detail or false}
-- code: 1 registered, 0 the ticket counter is at or above the score (strict; nothing
-- written), -3 the name holds another kind (detail: its kind; nothing written); or the
-- preamble's -2
-- `GET` fails on a key of another type: only then is its `TYPE` read. Any other failure
-- (a user not allowed to read the key) is the script's error, not another kind.
local current = redis.pcall('GET', KEYS[2])
if type(current) == 'table' then
  if not string.find(current.err, 'WRONGTYPE', 1, true) then
    return current
  end
  return {-3, epoch, false, 0, redis.call('TYPE', KEYS[2])['ok']}
end
-- A free key is no other kind's (a read-write lock keeps its writer's value or its readers'
-- mark under its name, docs/design.md §16); a value may be.
local owned = current and redis.call('HGET', KEYS[6], 'kind')
if owned and owned ~= 'lock' then
  return {-3, epoch, false, 0, owned}
end
local score, strict = ARGV[4], ARGV[5]
local counter = false
if strict == '1' then
  local c = tonumber(redis.call('GET', KEYS[4]) or '0')
  -- A round resent with the same ticket finds its own earlier write here: written.
  local mine = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[3]) or '-1') == tonumber(score)
  if mine then
    counter = string.format('%d', c)
  elseif c >= tonumber(score) then
    return {0, epoch, string.format('%d', c), 0, false}
  else
    redis.call('SET', KEYS[4], score)
    counter = score
  end
else
  -- Fair or not, a waiter's score is a ticket: the counter is raised to it, never
  -- lowered (a refresh of an older ticket keeps it), so that later arrivals score above.
  local c = tonumber(redis.call('GET', KEYS[4]) or '0')
  if c < tonumber(score) then
    redis.call('SET', KEYS[4], score)
    c = tonumber(score)
  end
  counter = string.format('%d', c)
end
local refresh = redis.call('ZADD', KEYS[3], score, ARGV[3]) == 0
redis.call('SET', KEYS[5], ARGV[6] .. ' ' .. ARGV[7], 'PX', ARGV[6])
local keep = 2 * tonumber(ARGV[6])
if redis.call('PTTL', KEYS[3]) < keep then
  redis.call('PEXPIRE', KEYS[3], keep)
end
local handed = 0
-- A key that is free (its holder expired or crashed) or handed to a queued waiter (this
-- one or another) belongs to the live head: a release that ran before the head
-- registered here, or while scores disagreed, handed it out of turn. It moves to the
-- head, which is told when it is not the caller. A waiter id is never a lease value, so
-- no lease is touched. An unknown head (nil) moves nothing. A waiter pruned here (its
-- liveness lapsed while the key handed to it lives on) keeps the key until it expires.
-- Every refresh looks for the head, pruning the dead members before it (within the
-- budget), whatever the key holds, so that the live waiters clear a queue headed by many
-- dead ones; a first registration does so only where the key may move.
local other = current and current ~= ARGV[3]
local member = other and redis.call('ZSCORE', KEYS[3], current)
if refresh or not other or member then
  local head, live = live_head(KEYS[3], ARGV[9])
  if other and (not member or not redis.call('ZSCORE', KEYS[3], current)) then
    head = nil
  end
  if head == ARGV[3] then
    if current ~= ARGV[3] then
      redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[6])
    end
    handed = 1
  elseif head and live and current ~= head and current ~= false then
    local ttl, channel = string.match(live, '^(%d+) (.*)$')
    redis.call('SET', KEYS[2], head, 'PX', ttl)
    redis.call('PUBLISH', channel, head)
  end
end
return {1, epoch, counter, handed, false}
