-- Room. ARGV: wallet, source bits, era, ctr. Removes sources from the live member, fenced;
-- {'ok', 1} if that removed the last one (the member is then deleted).
local now = now_ms()
local w, src = ARGV[1], tonumber(ARGV[2])
local m = parse(redis.call('HGET', K_MEM, w))
if not m or not live_until(m, now) then return {'ok', 0} end
local _, err = check(tonumber(ARGV[3]), tonumber(ARGV[4]), now)
if err then return err end
if bit.band(m.src, src) == 0 then return {'ok', 0} end
local after = u32(bit.band(m.src, bit.bnot(src)))
if after == 0 then
  remove_member(w, m, now)
  return {'ok', 1}
end
m.src = after
redis.call('HSET', K_MEM, w, enc(m))
return {'ok', 0}
