-- Interval sets stored as a flat JSON array {lo1, hi1, lo2, hi2, ...} (inclusive,
-- sorted, disjoint, non-adjacent). Mirrors ftpipeline/lineage/cemetery.py.
local function iv_get(hash, field)
  local raw = redis.call('HGET', hash, field)
  if not raw then return {} end
  return cjson.decode(raw)
end

local function iv_put(hash, field, b)
  if #b == 0 then
    redis.call('HDEL', hash, field)
  else
    redis.call('HSET', hash, field, cjson.encode(b))
  end
end

local function iv_contains(b, v)
  for i = 1, #b, 2 do
    if v < b[i] then return false end
    if v <= b[i + 1] then return true end
  end
  return false
end

-- add the range [lo, hi], merging it with overlapping or adjacent intervals
local function iv_add_range(b, lo, hi)
  local out = {}
  local placed = false
  local function push(a, z)
    local n = #out
    if n > 0 and a <= out[n] + 1 then
      if z > out[n] then out[n] = z end
    else
      out[n + 1] = a
      out[n + 2] = z
    end
  end
  for i = 1, #b, 2 do
    if not placed and lo < b[i] then
      push(lo, hi)
      placed = true
    end
    push(b[i], b[i + 1])
  end
  if not placed then push(lo, hi) end
  return out
end

local function iv_add(b, v)
  if iv_contains(b, v) then return b end
  return iv_add_range(b, v, v)
end

local function iv_remove(b, v)
  local out = {}
  for i = 1, #b, 2 do
    local lo, hi = b[i], b[i + 1]
    if v >= lo and v <= hi then
      if lo < v then out[#out + 1] = lo; out[#out + 1] = v - 1 end
      if v < hi then out[#out + 1] = v + 1; out[#out + 1] = hi end
    else
      out[#out + 1] = lo
      out[#out + 1] = hi
    end
  end
  return out
end

-- "actor.channel.seq.target.pf.tchannel" -> edge key "actor.channel.target.pf.tchannel", seq
local function split_name(name)
  local a, c, s, t, p, tc = string.match(name, '^([^.]+)%.([^.]+)%.([^.]+)%.([^.]+)%.([^.]+)%.([^.]+)$')
  return a .. '.' .. c .. '.' .. t .. '.' .. p .. '.' .. tc, tonumber(s)
end
