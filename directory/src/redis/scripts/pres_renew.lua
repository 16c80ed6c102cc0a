-- Room. ARGV: node, era, ctr, ttl. Extends the presence of activation (era, ctr), fenced.
local now = now_ms()
local era, ctr = tonumber(ARGV[2]), tonumber(ARGV[3])
local owner, err = check(era, ctr, now)
if err then return err end
if owner ~= ARGV[1] then return {'notowner'} end
return {'ok', renew_presence(era, ctr, tonumber(ARGV[4]), now)}
