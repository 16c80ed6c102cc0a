-- Nodes. The live registrations: {id, addr, load, draining, until}.
local now = now_ms()
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local u, load, dr, addr = string.match(all[i + 1], '^(%d+),(%d+),(%d+),(.*)$')
  if u and tonumber(u) > now then
    table.insert(out, {all[i], addr, tonumber(load), tonumber(dr), tonumber(u)})
  end
end
return {'ok', out}
