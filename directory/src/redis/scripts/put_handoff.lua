-- Room. ARGV: era, ctr, state. Stores the handoff state, fenced.
local _, err = check(tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
if err then return err end
redis.call('HSET', K_HANDOFF, 'era', ARGV[1], 'counter', ARGV[2], 'state', ARGV[3])
return {'ok'}
