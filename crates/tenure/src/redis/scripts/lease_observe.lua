-- Put (or keep) an observer's marker in the waiting line, so that releases
-- wake every watcher while it is there.
-- KEYS[1] waiting line; ARGV[1] marker id, ARGV[2] marker lifetime in
-- milliseconds, ARGV[3] the marker from last time ('' before the first)
-- Returns the marker.
local marker = string.format('%d 0 %s', server_ms() + tonumber(ARGV[2]), ARGV[1])
keep_place(KEYS[1], marker, ARGV[3], ARGV[2])
return marker
