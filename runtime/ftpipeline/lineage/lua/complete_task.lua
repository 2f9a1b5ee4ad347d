-- A worker finished a task: record its outputs and consumption in one atomic step.
-- KEYS: 1 ntt:<node> 2 not:<node> 3 pt 4 lt 5 rows 6 ct 7 state 8 inbox 9 alive 10 stats 11 meta 12 dead 13 run
--       14 done:<node>: the node's last completions recorded (a list, newest first, capped) 15 digest
-- ARGV: 1 node 2 task json 3 outputs json [[name, rows], ...] 4 consumed json [name, ...]
--       5 state channel ("" if none) 6 state step 7 lineage ("1"/"0") 8 event json
--       9 stats json {field: increment} 10 vector clock of the outputs ("" if none)
--       11 the task's dead-letter key (stage.channel@step) 12 its dead-letter records
--       13 the run token the node was admitted with ("": none; see coordinator/admission.py)
--       14 digests json {name: digest} of a keyed function's outputs ("": none; lineage/determinism.py)
-- An object recorded with a digest keeps its first one; a re-run whose digest differs is counted in the
-- event as "diverged" (the function broke its determinism contract).
-- Dead letters are counted once per (stage, channel, step), however often the step is replayed: the
-- count is set, not added, and the stats and the event carry only what is new ("dead_new").
-- Inputs are buried (consumed) only by the last of the tasks of the same stage, channel and step
-- pending on this node: two recoveries can leave two of them (an earlier plan's, writing some outputs,
-- and a later one's, writing others: lineage/planner.py places them together), and the first to finish
-- must not let the collector delete what the second still reads.
-- A completion sent again after its reply was lost (the client gave up on a Redis that froze, or a cut that
-- healed, and asked again on a new connection; the first request ran when Redis woke) finds its task gone
-- from NTT, as a superseded one does: the node's list of its last 256 recorded tasks tells the two apart (a
-- retry follows its first request within seconds; one list per node keeps Redis's size flat however long
-- the run; it expires ten minutes after the node's last completion, so a node gone leaves nothing).
-- Returns 1 recorded (now, or by that first request), 0 task no longer assigned here (superseded),
-- -1 node fenced off (declared dead, or of another run: the same id under an older token),
-- -2 no member at all: the store lost its state (a Redis restarted empty), which is not this node's fault.
if redis.call('SCARD', KEYS[9]) == 0 then return -2 end
if redis.call('SISMEMBER', KEYS[9], ARGV[1]) == 0 or (ARGV[13] ~= '' and redis.call('GET', KEYS[13]) ~= ARGV[13]) then
  redis.call('HINCRBY', KEYS[10], 'fenced_commits', 1)  -- a zombie tried to commit: refused, and counted
  return -1
end
if redis.call('SREM', KEYS[1], ARGV[2]) == 0 then
  if redis.call('LPOS', KEYS[14], ARGV[2]) then return 1 end
  return 0
end
redis.call('LPUSH', KEYS[14], ARGV[2])
redis.call('LTRIM', KEYS[14], 0, 255)
redis.call('EXPIRE', KEYS[14], 600)
local lineage = ARGV[7] == '1'
for _, out in ipairs(cjson.decode(ARGV[3])) do
  local name, rows = out[1], out[2]
  local was = redis.call('HGET', KEYS[3], name)
  if was and was ~= ARGV[1] then gc_add(KEYS[3], was, name) end  -- that copy is no longer located: dropped
  redis.call('HSET', KEYS[3], name, ARGV[1])
  redis.call('SADD', KEYS[2], name)
  redis.call('HSET', KEYS[5], name, rows)
  if lineage then redis.call('HSET', KEYS[4], name, ARGV[2]) end
  if ARGV[10] ~= '' then redis.call('HSET', KEYS[11], name, ARGV[10]) end
  local edge, seq = split_name(name)
  if iv_contains(iv_get(KEYS[6], edge), seq) then gc_mark(KEYS[3], name) end  -- a replay of a consumed object
end
local me = cjson.decode(ARGV[2])
local twin = false
for _, other in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local t = cjson.decode(other)
  if t.k == me.k and t.s == me.s and t.c == me.c and t.n == me.n then twin = true; break end
end
if not twin then
  for _, name in ipairs(cjson.decode(ARGV[4])) do bury_one(KEYS[6], KEYS[3], name) end
end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[7], ARGV[5], ARGV[6]) end
for field, n in pairs(cjson.decode(ARGV[9])) do redis.call('HINCRBY', KEYS[10], field, n) end
local dead = tonumber(ARGV[12])
local event = ARGV[8]
local diverged = 0
if ARGV[14] ~= '' then
  for name, digest in pairs(cjson.decode(ARGV[14])) do
    local first = redis.call('HGET', KEYS[15], name)
    if not first then redis.call('HSET', KEYS[15], name, digest)
    elseif first ~= digest then diverged = diverged + 1 end
  end
end
if diverged > 0 then event = string.sub(event, 1, -2) .. ',"diverged":' .. string.format('%d', diverged) .. '}' end
if dead > 0 then
  local new = dead - tonumber(redis.call('HGET', KEYS[12], ARGV[11]) or '0')
  if new > 0 then
    redis.call('HSET', KEYS[12], ARGV[11], dead)
    redis.call('HINCRBY', KEYS[10], 'dead_letters', new)
    -- appended as text: cjson would re-encode every number of the event as a double (an event time in
    -- microseconds came back as 1.767226145507e+15, a float, and lost digits past the 14th)
    event = string.sub(event, 1, -2) .. ',"dead_new":' .. string.format('%d', new) .. '}'
  end
end
redis.call('RPUSH', KEYS[8], event)
return 1
