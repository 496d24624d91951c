"""The coordinator's Lua scripts: leases with a fencing epoch, the fenced checkpoint and the
fenced answer. Each runs atomically on one query's keys (one hash tag, one cluster slot).
`store.QueryStore` registers each once, runs it by SHA, and is the only caller: the KEYS and
ARGV each comment lists are in the order it passes them."""

__all__ = ["ACQUIRE", "ANSWER", "CHECKPOINT", "REJECT", "RELEASE", "RENEW"]

# The stream id of `seconds` ago, by Redis's clock: XADD's MINID for a stream kept that long.
SINCE = """
local function since(seconds)
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(seconds) * 1000
  return tostring(math.max(0, ms))
end
"""

# KEYS: lease, epoch, active zset. ARGV: owner, lease ms, expiry ms, query id. -> epoch | nil
ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
  return epoch
end
return false
"""

# KEYS: lease, epoch, active zset. ARGV: owner, lease ms, expiry ms, query id. -> epoch | nil
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
  return tonumber(redis.call('GET', KEYS[2]))
end
return false
"""

# Gives a lease up and makes the query due for the reaper at once. KEYS: lease, active zset.
# ARGV: owner, query id. -> 1 | 0
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('ZADD', KEYS[2], 0, ARGV[2])
  return 1
end
return 0
"""

# Fenced: only the lease holder at the current epoch may write the checkpoint or the answer.
# KEYS: lease, epoch, checkpoint. ARGV: owner, epoch, last entry id, nodes. -> 1 | 0
CHECKPOINT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or tonumber(redis.call('GET', KEYS[2])) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[3], 'epoch', ARGV[2], 'last_id', ARGV[3], 'nodes', ARGV[4])
return 1
"""

# Writes the answer once, appends it to the answers stream (trimmed to the result TTL: older
# answers have expired), takes the query out of the in-flight sets, releases the lease, and
# lets the query's keys expire after the result TTL.
# KEYS: lease, epoch, reply, answers, in-flight, active, client in-flight, inbox, request,
# checkpoint, client key, sent ids, cancelled jobs. ARGV: owner, epoch, encoded answer, query
# id, TTL s. -> 1 | 0
ANSWER = (
    SINCE
    + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or tonumber(redis.call('GET', KEYS[2])) ~= tonumber(ARGV[2]) then
  return 0
end
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'EX', ARGV[5]) then
  redis.call('XADD', KEYS[4], 'MINID', since(ARGV[5]), '*', 'e', ARGV[3])
end
redis.call('ZREM', KEYS[5], ARGV[4])
redis.call('ZREM', KEYS[7], ARGV[4])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[6], ARGV[4])
for i = 8, 13 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""
)

# A question that cannot be searched gets a failed answer, so its client is told and its
# in-flight place freed; whatever a coordinator took for it is let go and expires.
# KEYS: reply, answers, in-flight, client in-flight, request, active, lease, epoch, inbox,
# checkpoint, client key, sent ids, cancelled jobs. ARGV: encoded answer, query id, TTL s. -> 1
REJECT = (
    SINCE
    + """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3]) then
  redis.call('XADD', KEYS[2], 'MINID', since(ARGV[3]), '*', 'e', ARGV[1])
end
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('ZREM', KEYS[6], ARGV[2])
redis.call('DEL', KEYS[7])
for i = 8, 13 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
redis.call('EXPIRE', KEYS[5], ARGV[3])
return 1
"""
)
