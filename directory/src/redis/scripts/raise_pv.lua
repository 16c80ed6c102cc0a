-- Room. ARGV: wallet, version. Raises the member's profile version.
local m = parse(redis.call('HGET', K_MEM, ARGV[1]))
local v = tonumber(ARGV[2])
if m and m.pv < v then
  m.pv = v
  redis.call('HSET', K_MEM, ARGV[1], enc(m))
end
return {'ok'}
