-- Room. ARGV: node, ttl. Renews the caller's own live lease, refuses another's, or reports the
-- room free with the last epoch it was issued (0, 0 if none).
local now = now_ms()
local node, ttl = ARGV[1], tonumber(ARGV[2])
local owner, e, c, u = live_placement(now)
if owner then
  if owner ~= node then return {'conflict', owner, e, c, u} end
  u = math.max(u, now + ttl)
  redis.call('HSET', K_PLACE, 'until', s(u))
  return {'ok', node, e, c, u}
end
local l = redis.call('HMGET', K_LAST, 'era', 'ctr')
return {'free', tonumber(l[1] or '0'), tonumber(l[2] or '0')}
