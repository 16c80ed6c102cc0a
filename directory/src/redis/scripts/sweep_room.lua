-- Room. Deletes the room's expired placement, dead members and spent activation records.
-- Returns {'ok', records removed, next check (ms; -1: nothing left to watch), removed
-- wallets...}. O(members) of this room, run once per lease period of a live room (the index
-- entry's score) or when it lapsed.
local now = now_ms()
local removed = 0
local out = {}
local nxt = -1
local function watch(t) if t > nxt then nxt = t end end
local p = redis.call('HMGET', K_PLACE, 'node', 'until')
if p[1] then
  if tonumber(p[2]) <= now then
    redis.call('DEL', K_PLACE); removed = removed + 1
  else
    watch(tonumber(p[2]))
  end
end
local all = redis.call('HGETALL', K_MEM)
local used = {}
for i = 1, #all, 2 do
  local w, m = all[i], parse(all[i + 1])
  if not m then
    redis.call('HDEL', K_MEM, w)
  else
    local u = live_until(m, now)
    if u then
      watch(u)
      used[act_id(m.era, m.ctr)] = true
    else
      remove_member(w, m, now)
      removed = removed + 1
      table.insert(out, w)
    end
  end
end
-- Activation records with no member left and a lapsed deadline. An activation that never
-- renewed (a room that lived less than one renewal period) has only its pending flag `E:p`
-- and no deadline: it counts as lapsed, or its record would outlive the room forever.
local a = redis.call('HGETALL', K_ACT)
local acts = {}
for i = 1, #a, 2 do
  local id, kind = string.match(a[i], '^(.*):([dcnp])$')
  if id then
    local rec = acts[id] or {d = 0}
    if kind == 'd' then rec.d = tonumber(a[i + 1]) or 0 end
    acts[id] = rec
  end
end
for id, rec in pairs(acts) do
  if used[id] or (rec.d > now and p[1]) then
    if rec.d > 0 then watch(rec.d) end
  else
    redis.call('HDEL', K_ACT, id .. ':d', id .. ':c', id .. ':n', id .. ':p')
  end
end
if redis.call('EXISTS', K_MEM) == 0 then
  redis.call('DEL', K_ENTS, K_PEND)
end
local res = {'ok', removed, nxt}
for _, w in ipairs(out) do table.insert(res, w) end
return res
