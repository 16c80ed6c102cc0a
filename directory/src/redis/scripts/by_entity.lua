-- Room. ARGV: entity. The live member holding the entity.
local now = now_ms()
local w = redis.call('HGET', K_ENTS, ARGV[1])
if not w then return {'none'} end
local m = parse(redis.call('HGET', K_MEM, w))
if not m then return {'none'} end
local u = live_until(m, now)
if not u then return {'none'} end
return {'ok', entry_reply(w, m, u)}
