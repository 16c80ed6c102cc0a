-- Room. ARGV: era, ctr. The fencing check.
local _, err = check(tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
if err then return err end
return {'ok'}
