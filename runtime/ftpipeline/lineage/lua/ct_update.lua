-- Add (ARGV[1] == "add") or remove the objects ARGV[2..] to/from the cemetery KEYS[1].
for i = 2, #ARGV do
  local edge, seq = split_name(ARGV[i])
  local b = iv_get(KEYS[1], edge)
  if ARGV[1] == 'add' then b = iv_add(b, seq) else b = iv_remove(b, seq) end
  iv_put(KEYS[1], edge, b)
end
return 1
