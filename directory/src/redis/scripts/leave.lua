-- Room. ARGV: wallet. Removes the wallet's member record (not fenced: the wallet registered
-- in another room, whose owner was fenced). Returns 1 if there was one.
local m = parse(redis.call('HGET', K_MEM, ARGV[1]))
if not m then return {'ok', 0} end
remove_member(ARGV[1], m, now_ms())
return {'ok', 1}
