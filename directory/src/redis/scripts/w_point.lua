-- Wallet. KEYS: 1 the wallet's hash (room: where its member is; version, psrc, at: its profile
-- announcement). ARGV: room. Points the wallet at the room; returns the profile version.
redis.call('HSET', KEYS[1], 'room', ARGV[1])
return {'ok', tonumber(redis.call('HGET', KEYS[1], 'version') or '0')}
