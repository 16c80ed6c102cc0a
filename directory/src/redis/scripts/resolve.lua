-- Room. The live placement.
local node, e, c, u = live_placement(now_ms())
if not node then return {'none'} end
return {'ok', node, e, c, u}
