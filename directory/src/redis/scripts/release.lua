-- Room. ARGV: node, era, ctr. Gives the lease up (the epoch history in `last` stays).
local now = now_ms()
local node, era, ctr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local owner, e, c = live_placement(now)
if not owner then return {'ok'} end
if e ~= era or c ~= ctr then return {'stale', e, c} end
if owner ~= node then return {'notowner'} end
redis.call('DEL', K_PLACE)
return {'ok'}
