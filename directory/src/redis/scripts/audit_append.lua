-- Room. ARGV: era, ctr, record. Appends a record, fenced; returns its sequence number.
local _, err = check(tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
if err then return err end
return {'ok', redis.call('RPUSH', K_AUDIT, ARGV[3])}
