-- The waiter queue of a lock (docs/design.md §17), shared by every script that keeps one:
-- joined in front of each at compile time (`scripts/sources.rs`).
--
-- live_head(q, prefix): the live head of queue `q`, whose waiters' liveness keys are
-- `prefix .. id`: its first member whose liveness key exists. The dead members met before
-- it are removed, at most PRUNE in one run, so that a script's time stays bounded. Returns
-- the head and its liveness record ("<waiter TTL ms> <channel>"); false when no member is
-- live; nil when the budget ran out before a live member was found (the head is unknown:
-- a fair grant must not be made, and the next run prunes on).
local PRUNE = 256
local function live_head(q, prefix)
  -- The common case, a live first member, costs one ZRANGE and one GET.
  local first = redis.call('ZRANGE', q, 0, 0)[1]
  if not first then return false end
  local live = redis.call('GET', prefix .. first)
  if live then return first, live end
  local pruned = 0
  while pruned < PRUNE do
    local batch = redis.call('ZRANGE', q, 0, 63)
    if #batch == 0 then return false end
    local dead = {}
    for _, m in ipairs(batch) do
      live = redis.call('GET', prefix .. m)
      if live then
        if #dead > 0 then redis.call('ZREM', q, unpack(dead)) end
        return m, live
      end
      dead[#dead + 1] = m
    end
    redis.call('ZREM', q, unpack(dead))
    pruned = pruned + #dead
  end
  if redis.call('ZCARD', q) == 0 then return false end
  return nil
end

-- hand_on(key, q, prefix, notice): lock key `key` was just freed; it goes to the live head
-- of `q`: set to the head's id with the head's own waiter TTL, and the head alone is told
-- on its channel. Without a known live head, the release notice is published on channel
-- `notice` for waiters that are not queued (docs/design.md §6); a live head the budget did
-- not reach takes the free key at its next refresh. Returns the waiter handed to, or false.
local function hand_on(key, q, prefix, notice)
  local head, live = live_head(q, prefix)
  if head then
    -- Always live, but for the planted `HandoffIgnoresLiveness`.
    if live then
      local ttl, channel = string.match(live, '^(%d+) (.*)$')
      redis.call('SET', key, head, 'PX', ttl)
      redis.call('PUBLISH', channel, head)
      return head
    end
    return false
  end
  redis.call('PUBLISH', notice, key)
  return false
end

