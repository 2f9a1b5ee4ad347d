-- Add the whole range [ARGV[1], ARGV[2]] of sequence numbers to the cemetery for each edge
-- ARGV[3..] (a checkpoint covers these steps of a stateful channel's inputs). KEYS[1]: ct.
local lo, hi = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 3, #ARGV do
  iv_put(KEYS[1], ARGV[i], iv_add_range(iv_get(KEYS[1], ARGV[i]), lo, hi))
end
return 1
