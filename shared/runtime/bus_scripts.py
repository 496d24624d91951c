"""The bus's Lua scripts (`bus.Bus` registers each once and is the only caller): an
acknowledgement by the entry's owner only, a heartbeat that keeps a consumer's entries, and a
dead letter written with its acknowledgement. The KEYS and ARGV each comment lists are in the
order the bus passes them."""

__all__ = ["ACK_IF_OWNER", "DEAD_LETTER", "HEARTBEAT"]

# KEYS: stream. ARGV: group, entry id, consumer. -> what XACK returned, 0 if another consumer owns it.
ACK_IF_OWNER = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
end
return 0
"""

# KEYS: stream. ARGV: group, consumer, ids... -> the ids this consumer no longer owns.
HEARTBEAT = """
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# KEYS: stream, its dead-letter stream. ARGV: group, entry id, reason, deliveries, the message's
# first bytes, its length, entries kept, TTL s. -> what XACK returned
DEAD_LETTER = """
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'stream', KEYS[1], 'group', ARGV[1],
           'id', ARGV[2], 'reason', ARGV[3], 'deliveries', ARGV[4], 'bytes', ARGV[6], 'e', ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[8])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
"""
