-- Room. ARGV: node, ttl, era, ctr (a fresh epoch from next_epoch). Takes the room if it is
-- still free and the epoch is above every epoch the room was issued ('behind' otherwise: the
-- epoch source lost data; the caller asks again with a higher floor).
local now = now_ms()
local node, ttl, era, ctr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local owner, e, c, u = live_placement(now)
if owner then
  if owner ~= node then return {'conflict', owner, e, c, u} end
  u = math.max(u, now + ttl)
  redis.call('HSET', K_PLACE, 'until', s(u))
  return {'ok', node, e, c, u}
end
local l = redis.call('HMGET', K_LAST, 'era', 'ctr')
if l[1] then
  local le, lc = tonumber(l[1]), tonumber(l[2])
  if era < le or (era == le and ctr <= lc) then return {'behind', le, lc} end
end
u = now + ttl
redis.call('HSET', K_PLACE, 'node', node, 'era', s(era), 'counter', s(ctr), 'until', s(u))
redis.call('HSET', K_LAST, 'era', s(era), 'ctr', s(ctr))
return {'ok', node, era, ctr, u}
