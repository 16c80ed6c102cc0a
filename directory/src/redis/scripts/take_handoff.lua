-- Room. Removes and returns the handoff state.
local f = redis.call('HMGET', K_HANDOFF, 'era', 'counter', 'state')
if not f[1] then return {'none'} end
redis.call('DEL', K_HANDOFF)
return {'ok', tonumber(f[1]), tonumber(f[2]), f[3]}
