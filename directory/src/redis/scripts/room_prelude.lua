-- Room scripts: every key is in the room's slot (hash tag {r:ROOM}).
-- KEYS: 1 place (hash node, era, counter, until), 2 last (hash era, ctr: the last epoch issued
-- to the room), 3 act (hash: per activation E = 'era:ctr' the fields E..':d' presence deadline,
-- E..':c' chain id, E..':n' chained members, E..':p' pending flag), 4 mem (hash wallet ->
-- member), 5 ents (hash entity -> wallet), 6 pend (set: wallets registered since the
-- activation's last renewal), 7 audit (list), 8 handoff (hash era, counter, state).
--
-- A member is 'entity,sources,pv,era,ctr,until,chain,node' (node last: it may hold commas).
-- It is live while its own `until` (now + ttl at registration) has not passed, or while it is
-- chained (chain == its activation's chain id) and the activation's deadline has not passed.
-- A renewal of an activation chains every pending member that is live at that moment, so a
-- renewal costs O(1) commands plus O(members registered since the last renewal).
local K_PLACE, K_LAST, K_ACT, K_MEM, K_ENTS, K_PEND, K_AUDIT, K_HANDOFF =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

local function live_placement(now)
  local p = redis.call('HMGET', K_PLACE, 'node', 'era', 'counter', 'until')
  if p[1] and tonumber(p[4]) > now then
    return p[1], tonumber(p[2]), tonumber(p[3]), tonumber(p[4])
  end
  return nil
end
local function check(era, counter, now)
  local node, e, c = live_placement(now)
  if not node then return nil, {'stale'} end
  if e ~= era or c ~= counter then return nil, {'stale', e, c} end
  return node, nil
end
local function act_id(era, ctr) return s(era) .. ':' .. s(ctr) end
local function parse(v)
  if not v then return nil end
  local ent, src, pv, era, ctr, u, chain, node =
    string.match(v, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(.*)$')
  if not ent then return nil end
  return {ent = ent, src = tonumber(src), pv = tonumber(pv), era = tonumber(era),
    ctr = tonumber(ctr), u = tonumber(u), chain = tonumber(chain), node = node}
end
local function enc(m)
  return table.concat({m.ent, s(m.src), s(m.pv), s(m.era), s(m.ctr), s(m.u), s(m.chain), m.node}, ',')
end
-- The activation record of a member's epoch: deadline, chain id (read once per script per
-- activation: a scan over a room's members costs one HMGET per activation, not per member).
local act_cache = {}
local function act_of(m)
  local id = act_id(m.era, m.ctr)
  local c = act_cache[id]
  if not c then
    local a = redis.call('HMGET', K_ACT, id .. ':d', id .. ':c')
    c = {tonumber(a[1] or '0'), tonumber(a[2] or '0')}
    act_cache[id] = c
  end
  return c[1], c[2]
end
-- The member's lease end if it is live at `now`, else nil; and whether it is chained.
local function live_until(m, now)
  local best = 0
  local chained = false
  if m.chain > 0 then
    local d, c = act_of(m)
    if c == m.chain and d > now then best = d; chained = true end
  end
  if m.u > now and m.u > best then best = m.u end
  if best > now then return best, chained end
  return nil, false
end
local function remove_member(w, m, now)
  if redis.call('HGET', K_ENTS, m.ent) == w then redis.call('HDEL', K_ENTS, m.ent) end
  redis.call('HDEL', K_MEM, w)
  local _, chained = live_until(m, now)
  if chained then redis.call('HINCRBY', K_ACT, act_id(m.era, m.ctr) .. ':n', -1) end
end
-- wallet, entity, room (filled by the caller), sources, node, pv, until.
local function entry_reply(w, m, u)
  return {w, tonumber(m.ent), '', m.src, m.node, m.pv, u}
end
-- Extends activation (era, ctr)'s presence deadline to at least now + ttl and chains its
-- pending members that are still live. Returns the number of chained members.
local function renew_presence(era, ctr, ttl, now)
  local id = act_id(era, ctr)
  local a = redis.call('HMGET', K_ACT, id .. ':d', id .. ':c', id .. ':n', id .. ':p')
  local d, c, n = tonumber(a[1] or '0'), tonumber(a[2] or '0'), tonumber(a[3] or '0')
  if d <= now then
    -- No live chain (first renewal, or the activation lapsed): its chained members are dead
    -- for good; a new chain starts.
    c = c + 1; n = 0
  end
  local broke = d <= now
  d = math.max(d, now + ttl)
  local function chain(w, m)
    if m and m.era == era and m.ctr == ctr and m.u > now and m.chain ~= c then
      m.chain = c
      redis.call('HSET', K_MEM, w, enc(m))
      n = n + 1
    end
  end
  if broke then
    -- Rare (once per activation, or after a lapse): every member still live on its own lease
    -- joins the new chain.
    local all = redis.call('HGETALL', K_MEM)
    for i = 1, #all, 2 do chain(all[i], parse(all[i + 1])) end
    redis.call('DEL', K_PEND)
  elseif a[4] == '1' then
    for _, w in ipairs(redis.call('SMEMBERS', K_PEND)) do
      chain(w, parse(redis.call('HGET', K_MEM, w)))
    end
    redis.call('DEL', K_PEND)
  end
  redis.call('HSET', K_ACT, id .. ':d', s(d), id .. ':c', s(c), id .. ':n', s(n), id .. ':p', '0')
  act_cache[id] = {d, c}
  return n
end
