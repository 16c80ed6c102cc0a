-- Room. ARGV: wallet, source bits, era, ctr. ORs a source into the live member, fenced.
local now = now_ms()
local w, src = ARGV[1], tonumber(ARGV[2])
local m = parse(redis.call('HGET', K_MEM, w))
if not m or not live_until(m, now) then return {'notfound'} end
local _, err = check(tonumber(ARGV[3]), tonumber(ARGV[4]), now)
if err then return err end
m.src = u32(bit.bor(m.src, src))
redis.call('HSET', K_MEM, w, enc(m))
return {'ok'}
