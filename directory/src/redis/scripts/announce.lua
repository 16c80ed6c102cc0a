-- Wallet. ARGV: version, source bits. Version-aware dedup of a profile announcement.
-- Returns the outcome, its number, whether the record is new (1/0) and the wallet's room ('').
local now = now_ms()
local v, src = tonumber(ARGV[1]), tonumber(ARGV[2])
local f = redis.call('HMGET', KEYS[1], 'version', 'psrc', 'room')
local room = f[3] or ''
if not f[1] then
  redis.call('HSET', KEYS[1], 'version', s(v), 'psrc', s(src), 'at', s(now))
  return {'fresh', 0, 1, room}
elseif v > tonumber(f[1]) then
  redis.call('HSET', KEYS[1], 'version', s(v), 'psrc', s(src), 'at', s(now))
  return {'superseded', tonumber(f[1]), 0, room}
elseif v == tonumber(f[1]) then
  local m = u32(bit.bor(tonumber(f[2]), src))
  redis.call('HSET', KEYS[1], 'psrc', s(m), 'at', s(now))
  return {'merged', m, 0, room}
end
return {'dropped', tonumber(f[1]), 0, room}
