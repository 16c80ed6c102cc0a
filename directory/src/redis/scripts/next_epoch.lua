-- Epochs. KEYS: 1 the epoch hash (era, ctr, mark), 2 this master's marker. ARGV: min era,
-- seen era, seen counter (the highest epoch the caller knows of, here or in the room).
-- Issues the next epoch. A new era max(now, min era + 1) starts when the hash is missing, is
-- below what the caller has seen (the store lost data), or when the marker does not match:
-- the marker is written to this master (and its AOF) but never replicated, so a promoted
-- replica, which may lack acknowledged increments, starts a new era as a restart does.
local now = now_ms()
local min_era, seen_era, seen_ctr = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local f = redis.call('HMGET', KEYS[1], 'era', 'ctr', 'mark')
local mark = redis.call('GET', KEYS[2])
local e, c
if f[1] and mark and mark == f[3] and (tonumber(f[1]) > seen_era or
    (tonumber(f[1]) == seen_era and tonumber(f[2]) >= seen_ctr)) then
  e = tonumber(f[1]); c = tonumber(f[2]) + 1
else
  e = math.max(now, min_era + 1, seen_era + 1); c = 1
  if f[1] and tonumber(f[1]) >= e then e = tonumber(f[1]) + 1 end
  mark = s(e) .. '-' .. s(now)
  redis.set_repl(redis.REPL_AOF)
  redis.call('SET', KEYS[2], mark)
  redis.set_repl(redis.REPL_ALL)
end
redis.call('HSET', KEYS[1], 'era', s(e), 'ctr', s(c), 'mark', mark)
return {'ok', e, c}
