-- Room. ARGV: node, era, ctr, ttl, presence ttl (0: the lease only). Extends the live lease
-- of (era, ctr) held by node, and with a presence ttl the activation's presence too (one
-- script per room per renewal period, whatever the number of members).
local now = now_ms()
local node, era, ctr, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local pttl = tonumber(ARGV[5])
local owner, err = check(era, ctr, now)
if err then return err end
if owner ~= node then return {'notowner'} end
local u = math.max(tonumber(redis.call('HGET', K_PLACE, 'until')), now + ttl)
redis.call('HSET', K_PLACE, 'until', s(u))
local n = 0
if pttl > 0 then n = renew_presence(era, ctr, pttl, now) end
return {'ok', node, era, ctr, u, n}
