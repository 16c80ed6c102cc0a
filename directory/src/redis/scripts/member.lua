-- Room. ARGV: wallet. The wallet's live member as an entry reply.
local now = now_ms()
local m = parse(redis.call('HGET', K_MEM, ARGV[1]))
if not m then return {'none'} end
local u = live_until(m, now)
if not u then return {'none'} end
return {'ok', entry_reply(ARGV[1], m, u)}
