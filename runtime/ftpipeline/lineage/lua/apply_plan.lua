-- Apply a recovery plan atomically (the coordinator holds the PT delete lock).
-- KEYS: 1 pt 2 ct 3 placement 4 alive 5 epoch 6 ntt:<dead> 7 not:<dead> 8 gc:<dead>
-- ARGV: 1 key prefix 2 dead node 3 epoch 4 tasks json [[node, task json], ...]
--       5 resurrect json [name, ...] 6 moves json {channel: node}
local prefix, dead = ARGV[1], ARGV[2]
redis.call('SREM', KEYS[4], dead)
redis.call('DEL', KEYS[6])
for _, pair in ipairs(cjson.decode(ARGV[4])) do
  redis.call('SADD', prefix .. 'ntt:' .. pair[1], pair[2])
end
for _, name in ipairs(cjson.decode(ARGV[5])) do
  local edge, seq = split_name(name)
  iv_put(KEYS[2], edge, iv_remove(iv_get(KEYS[2], edge), seq))
end
for _, name in ipairs(redis.call('SMEMBERS', KEYS[7])) do
  if redis.call('HGET', KEYS[1], name) == dead then redis.call('HDEL', KEYS[1], name) end
end
redis.call('DEL', KEYS[7])
redis.call('DEL', KEYS[8])
for ch, node in pairs(cjson.decode(ARGV[6])) do redis.call('HSET', KEYS[3], ch, node) end
redis.call('SET', KEYS[5], ARGV[3])
return 1
