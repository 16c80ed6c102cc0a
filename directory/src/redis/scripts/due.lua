-- Index. KEYS: 1 the sweep index (zset item -> when to check it). ARGV: limit, lease ms.
-- Returns the items due with their new score: each is pushed `lease` ms ahead, so sweepers of
-- other processes skip what this one is looking at (it re-scores or removes it after).
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now), 'LIMIT', 0, tonumber(ARGV[1]))
local later = s(now + tonumber(ARGV[2]))
local out = {}
for _, item in ipairs(due) do
  redis.call('ZADD', KEYS[1], later, item)
  table.insert(out, item)
  table.insert(out, later)
end
return {'ok', out}
