-- Index. ARGV: item, score. Removes the item only if its score is still the one the sweeper
-- read (a claim or registration in between re-scored it: the item stays).
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {'ok', 1}
end
return {'ok', 0}
