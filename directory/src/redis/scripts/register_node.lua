-- Nodes. KEYS: 1 the registry (hash id -> 'until,load,draining,addr'). ARGV: id, addr, load,
-- draining, ttl. Returns 1 if the node was not registered before.
local u = now_ms() + tonumber(ARGV[5])
local new = redis.call('HSET', KEYS[1], ARGV[1], table.concat({s(u), ARGV[3], ARGV[4], ARGV[2]}, ','))
return {'ok', new}
