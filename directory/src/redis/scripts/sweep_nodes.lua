-- Nodes. Deletes lapsed registrations. Returns {'ok', removed, next check (-1: none left)}.
local now = now_ms()
local n, nxt = 0, -1
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local u = tonumber(string.match(all[i + 1], '^(%d+),') or '0')
  if u <= now then
    redis.call('HDEL', KEYS[1], all[i]); n = n + 1
  elseif u > nxt then
    nxt = u
  end
end
return {'ok', n, nxt}
