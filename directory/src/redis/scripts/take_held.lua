-- Resume holder. ARGV: token. Removes and returns the entry.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return {'none'} end
redis.call('HDEL', KEYS[1], ARGV[1])
return {'ok', v}
