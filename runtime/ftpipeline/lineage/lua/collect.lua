-- Garbage collection of one worker's consumed objects, in shared mode of the PT
-- delete lock: refused while the coordinator holds it exclusively (recovering).
-- KEYS: 1 pt 2 not:<node> 3 ct 4 lock 5 gc:<node>
-- ARGV: 1 node
-- Walks only the candidates buried since the last collection (gc_marks.lua), each checked against
-- the cemetery again: one resurrected meanwhile by a recovery stays (and is marked again when buried).
-- A candidate that PT locates elsewhere (another node wrote the object again: complete_task.lua) is a
-- copy no one reads: it goes whether consumed or not.
-- Returns the names dropped from PT/NOT (the caller then deletes their files),
-- or false when the lock is held exclusively.
if redis.call('EXISTS', KEYS[4]) == 1 then return false end
local dropped = {}
local cache = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  local edge, seq = split_name(name)
  local b = cache[edge]
  if b == nil then b = iv_get(KEYS[3], edge); cache[edge] = b end
  local holder = redis.call('HGET', KEYS[1], name)
  if (holder ~= ARGV[1] or iv_contains(b, seq)) and redis.call('SREM', KEYS[2], name) == 1 then
    if holder == ARGV[1] then redis.call('HDEL', KEYS[1], name) end
    dropped[#dropped + 1] = name
  end
end
redis.call('DEL', KEYS[5])
return dropped
