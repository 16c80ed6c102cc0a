-- Wallet. ARGV: grace ms. Deletes a profile announcement whose wallet has no room and that is
-- older than the grace. Returns {'ok', removed, next check (-1: nothing left)}.
local now = now_ms()
local f = redis.call('HMGET', KEYS[1], 'version', 'at', 'room')
if not f[1] then return {'ok', 0, -1} end
local grace = tonumber(ARGV[1])
local due = tonumber(f[2]) + grace
if f[3] or due > now then return {'ok', 0, math.max(due, now + grace)} end
redis.call('HDEL', KEYS[1], 'version', 'psrc', 'at')
return {'ok', 1, -1}
