-- Room. ARGV: wallet, entity, sources, node, pv, era, ctr, ttl. Registers (or replaces) the
-- wallet as a member, fenced by (era, ctr) whose owner must be node. A live member of another
-- wallet on the same entity under an older epoch is evicted (returned), under the same or a
-- newer one it is a conflict. A live member re-registering keeps its sources other than the
-- room's own.
local now = now_ms()
local w, ent, src, node, pv = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local era, ctr, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local owner, err = check(era, ctr, now)
if err then return err end
if owner ~= node then return {'notowner'} end
local evicted = ''
local other = redis.call('HGET', K_ENTS, ent)
if other and other ~= w then
  local o = parse(redis.call('HGET', K_MEM, other))
  if o then
    if live_until(o, now) and (o.era > era or (o.era == era and o.ctr >= ctr)) then
      return {'conflict'}
    end
    remove_member(other, o, now)
    evicted = other
  else
    redis.call('HDEL', K_ENTS, ent)
  end
end
local old = parse(redis.call('HGET', K_MEM, w))
if old then
  -- A rejoin keeps the sources other services hold (all but the room's own, bit 1).
  if live_until(old, now) then src = u32(bit.bor(src, bit.band(old.src, bit.bnot(1)))) end
  remove_member(w, old, now)
end
local u = now + ttl
redis.call('HSET', K_MEM, w, enc({ent = ent, src = src, pv = pv, era = era, ctr = ctr, u = u,
  chain = 0, node = node}))
redis.call('HSET', K_ENTS, ent, w)
redis.call('SADD', K_PEND, w)
redis.call('HSET', K_ACT, act_id(era, ctr) .. ':p', '1')
return {'ok', u, evicted}
