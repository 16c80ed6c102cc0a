-- Resume holder. KEYS: 1 the holder's hash (token -> entry; the key's Redis TTL is the
-- holder's lease). ARGV: token, entry, ttl ms.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {'ok'}
