-- Add (ARGV[1] == "add") or remove the objects ARGV[2..] to/from the cemetery KEYS[1].
-- KEYS: 1 ct 2 pt (a newly buried object becomes a collection candidate of its holder)
for i = 2, #ARGV do
  if ARGV[1] == 'add' then
    bury_one(KEYS[1], KEYS[2], ARGV[i])
  else
    local edge, seq = split_name(ARGV[i])
    iv_put(KEYS[1], edge, iv_remove(iv_get(KEYS[1], edge), seq))
  end
end
return 1
