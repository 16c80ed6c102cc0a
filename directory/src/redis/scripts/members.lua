-- Room. ARGV: 'all', or 'ids' and wallets. The live members as entry replies.
local now = now_ms()
local out = {}
local function add(w, m)
  if m then
    local u = live_until(m, now)
    if u then table.insert(out, entry_reply(w, m, u)) end
  end
end
if ARGV[1] == 'all' then
  local all = redis.call('HGETALL', K_MEM)
  for i = 1, #all, 2 do add(all[i], parse(all[i + 1])) end
else
  for i = 2, #ARGV do add(ARGV[i], parse(redis.call('HGET', K_MEM, ARGV[i]))) end
end
return {'ok', out}
