-- Wallet. ARGV: room, drop profile (1/0). Forgets the wallet's room if it is still that one
-- (and then its profile announcement with it, if asked).
if redis.call('HGET', KEYS[1], 'room') ~= ARGV[1] then return {'ok', 0} end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HDEL', KEYS[1], 'room')
end
return {'ok', 1}
