-- Index. KEYS: 1 the sweep index (zset item -> when to check it). ARGV: limit. The items due.
return {'ok', redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s(now_ms()), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))}
