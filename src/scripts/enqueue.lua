-- Registers (or refreshes) a waiter in the queue of a lock (docs/design.md §17), with the
-- master's data epoch (restart quarantine) and the cluster record, as `acquire.lua`. A lock
-- key that is free or handed to a queued waiter then goes to the live head: to this waiter
-- when it heads; otherwise a key handed out of turn (to this waiter or another behind the
-- head) goes on to the head, which is told, and a free key is left to the head.
-- KEYS[1] lock key, KEYS[2] epoch record, KEYS[3] cluster record, KEYS[4] waiter queue,
-- KEYS[5] ticket counter, KEYS[6] the waiter's liveness key, KEYS[7] owner record
-- ARGV[1] waiter id, ARGV[2] score (a ticket), ARGV[3] strict: '1' only for a fair
-- registration's ticket write-back, ARGV[4] waiter ttl ms, ARGV[5] the waiter's hand-off
-- channel, ARGV[6] fair: '1' or '0' (the steps are the same), ARGV[7] id for a new
-- epoch, ARGV[8] the caller's cluster fingerprint, ARGV[9] the prefix of the waiters'
-- liveness keys
-- Returns {code, epoch record, server time us, ticket counter, handed (1/0),
--          the lock key's pttl (-2 when free or handed), detail or false}
-- code: 1 registered, 0 the ticket counter is at or above the score (strict; nothing
-- written), -2 the cluster record's fingerprint differs, -3 the name holds another kind
-- (detail: its kind; nothing written)
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', t[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[7] .. ':' .. now
  redis.call('SET', KEYS[2], epoch)
end
local recorded = redis.call('HGET', KEYS[3], 'fingerprint')
if (recorded or '') ~= ARGV[8] then
  return {-2, epoch, now, false, 0, -2, recorded}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return {-3, epoch, now, false, 0, -2, kind}
end
local owned = redis.call('HGET', KEYS[7], 'kind')
if owned and owned ~= 'lock' then
  return {-3, epoch, now, false, 0, -2, owned}
end
local score, strict = ARGV[2], ARGV[3]
local counter = false
if strict == '1' then
  local c = tonumber(redis.call('GET', KEYS[5]) or '0')
  -- A round resent with the same ticket finds its own earlier write here: written.
  local mine = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]) or '-1') == tonumber(score)
  if mine then
    counter = string.format('%d', c)
  elseif c >= tonumber(score) then
    return {0, epoch, now, string.format('%d', c), 0, -2, false}
  else
    redis.call('SET', KEYS[5], score)
    counter = score
  end
else
  -- Fair or not, a waiter's score is a ticket: the counter is raised to it, never
  -- lowered (a refresh of an older ticket keeps it), so that later arrivals score above.
  local c = tonumber(redis.call('GET', KEYS[5]) or '0')
  if c < tonumber(score) then
    redis.call('SET', KEYS[5], score)
    c = tonumber(score)
  end
  counter = string.format('%d', c)
end
redis.call('ZADD', KEYS[4], score, ARGV[1])
redis.call('SET', KEYS[6], ARGV[4] .. ' ' .. ARGV[5], 'PX', ARGV[4])
local keep = 2 * tonumber(ARGV[4])
if redis.call('PTTL', KEYS[4]) < keep then
  redis.call('PEXPIRE', KEYS[4], keep)
end
local current = redis.call('GET', KEYS[1])
local handed = 0
-- Every registration prunes the dead members at the head of the queue (within the
-- budget), so that a queue headed by many dead waiters is cleared by its live ones.
local head = live_head(KEYS[4], ARGV[9])
-- A key that is free (its holder expired or crashed) or handed to a queued waiter (this
-- one or another) belongs to the live head: a release that ran before the head
-- registered here, or while scores disagreed, handed it out of turn. It moves to the
-- head, which is told when it is not the caller. A waiter id is never a lease value, so
-- no lease is touched. An unknown head (nil) moves nothing.
if current == false or current == ARGV[1] or redis.call('ZSCORE', KEYS[4], current) then
  if head == ARGV[1] then
    if current ~= ARGV[1] then
      redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
    end
    handed = 1
  elseif head and current ~= head and current ~= false then
    local live = redis.call('GET', ARGV[9] .. head)
    if live then
      local ttl, channel = string.match(live, '^(%d+) (.*)$')
      redis.call('SET', KEYS[1], head, 'PX', ttl)
      redis.call('PUBLISH', channel, head)
    end
  end
end
local pttl = -2
if handed == 0 and current then
  pttl = redis.call('PTTL', KEYS[1])
end
return {1, epoch, now, counter, handed, pttl, false}
