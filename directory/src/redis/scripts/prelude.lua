-- Shared by every script. All integers travel as decimal strings; Lua numbers are doubles, so
-- every integer stays below 2^53 (checked by the Rust side).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function s(x) return string.format('%d', x) end
local function u32(x) if x < 0 then return x + 4294967296 end return x end
