-- Collection candidates. A name newly put in the cemetery is added to gc:<holder>, the set that its
-- holder's next collection (collect.lua) walks: a collection costs what was buried since the last one,
-- not what the worker holds. Shared by every script that buries (prepended like intervals.lua).
local function gc_add(pt, holder, name)
  redis.call('SADD', string.sub(pt, 1, -3) .. 'gc:' .. holder, name)  -- pt is '<prefix>pt'
end

local function gc_mark(pt, name)
  local holder = redis.call('HGET', pt, name)
  if holder then gc_add(pt, holder, name) end
end

-- edge key "actor.channel.target.pf.tchannel", seq -> object name "actor.channel.seq.target.pf.tchannel"
local function join_name(edge, seq)
  local a, c, rest = string.match(edge, '^([^.]+)%.([^.]+)%.(.+)$')
  return a .. '.' .. c .. '.' .. string.format('%d', seq) .. '.' .. rest
end

-- bury one object: into the cemetery and, if it was not there yet, among its holder's candidates
local function bury_one(ct, pt, name)
  local edge, seq = split_name(name)
  local b = iv_get(ct, edge)
  if iv_contains(b, seq) then return end
  iv_put(ct, edge, iv_add(b, seq))
  gc_mark(pt, name)
end
