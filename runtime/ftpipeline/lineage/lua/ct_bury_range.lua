-- Add the whole range [ARGV[1], ARGV[2]] of sequence numbers to the cemetery for each edge
-- ARGV[4..] (a checkpoint covers these steps of a stateful channel's inputs).
-- KEYS: 1 ct 2 pt. The objects of steps from ARGV[3] on that were not buried yet become collection
-- candidates of their holders (steps before it were covered by an earlier checkpoint: none is held).
local lo, hi, mark_from = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 4, #ARGV do
  local edge = ARGV[i]
  local b = iv_get(KEYS[1], edge)
  for seq = math.max(lo, mark_from), hi do
    if not iv_contains(b, seq) then gc_mark(KEYS[2], join_name(edge, seq)) end
  end
  iv_put(KEYS[1], edge, iv_add_range(b, lo, hi))
end
return 1
