"""The coordinator's Lua scripts: adoption, leases with a fencing epoch, the fenced checkpoint
and the fenced answer. Each runs atomically on one query's keys (one hash tag, one cluster slot).
`store.QueryStore` registers each once, runs it by SHA, and is the only caller: the KEYS and
ARGV each comment lists are in the order it passes them."""

__all__ = ["ADOPT", "ANSWER", "CHECKPOINT", "RECOUNT", "REJECT", "RELEASE", "RENEW_ALL", "RESTORE", "TREE"]

# The stream id of `seconds` ago, by Redis's clock: XADD's MINID for a stream kept that long.
SINCE = """
local function since(seconds)
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(seconds) * 1000
  return tostring(math.max(0, ms))
end
"""

# The bytes the ingress reserved for query `id`'s search (`reserve`), given back once: by its
# answer or its refusal. HDEL writes first (Redis allows it when out of memory).
GIVE_BACK = """
local function give_back(reserved, total, id)
  local held = redis.call('HGET', reserved, id)
  if held then
    redis.call('HDEL', reserved, id)
    redis.call('DECRBY', total, held)
  end
end
"""

# Adoption in one round trip: whether the query is answered, its stored request (where asked
# for: none stored, nothing to adopt), the lease with its next fencing epoch and its place among
# the active leases, and the inbox to replay.
# KEYS: lease, epoch, active zset, reply, request, inbox. ARGV: owner, lease ms, expiry ms,
# query id, 1 to read the request (else 0). -> {'answered'} | {'missing'} | {'held', request}
# | {'taken', request, epoch, inbox entries}; the request is nil where it was not asked for
ADOPT = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {'answered'} end
local request = false
if ARGV[5] == '1' then
  request = redis.call('GET', KEYS[5])
  if not request then return {'missing'} end
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'held', request} end
local epoch = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return {'taken', request, epoch, redis.call('XRANGE', KEYS[6], '-', '+')}
"""

# Renews every lease a coordinator holds in one slot, in one call (a round trip per query
# would take longer than the lease once hundreds are held). KEYS: active zset, then the lease
# and epoch of each query. ARGV: owner, lease ms, expiry ms, then each query's id, in the
# order of KEYS. -> the epoch of each query, 0 where the lease is no longer ours
RENEW_ALL = """
local out = {}
for i = 4, #ARGV do
  local lease, epoch = KEYS[2 * (i - 3)], KEYS[2 * (i - 3) + 1]
  if redis.call('GET', lease) == ARGV[1] then
    redis.call('PEXPIRE', lease, ARGV[2])
    redis.call('ZADD', KEYS[1], ARGV[3], ARGV[i])
    out[#out + 1] = tonumber(redis.call('GET', epoch)) or 0
  else
    out[#out + 1] = 0
  end
end
return out
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
# No epoch at all is not another holder's: Redis lost the query's state (`FENCED`).
FENCED = """
local function fenced(lease, epoch, owner, mine)
  local now = redis.call('GET', epoch)
  if not now then return -1 end
  if redis.call('GET', lease) ~= owner or tonumber(now) ~= tonumber(mine) then return 0 end
  return 1
end
"""

# KEYS: lease, epoch, checkpoint. ARGV: owner, epoch, last entry id, nodes. -> 1, 0 (another
# holds the lease) or -1 (Redis lost the query's state). Its first write is one a Redis at its
# maxmemory allows (PERSIST of the checkpoint, which has no TTL while the query is searched: it
# changes nothing), so that a search admitted goes on there (`publisher._PUBLISH`).
CHECKPOINT = (
    FENCED
    + """
local fence = fenced(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if fence ~= 1 then return fence end
redis.call('PERSIST', KEYS[3])
redis.call('HSET', KEYS[3], 'epoch', ARGV[2], 'last_id', ARGV[3], 'nodes', ARGV[4])
return 1
"""
)

# Writes the answer once, appends it to the answers stream (trimmed to the result TTL: older
# answers have expired), takes the query out of the in-flight sets, releases the lease, and
# compacts what the query keeps: its tree's record (the tree stream's entries, packed by the
# caller) replaces the tree stream; the inbox, the checkpoint, the sent ids and the cancel
# marks, which only a search in progress reads, expire soon (a late result for an answered
# query is not published: `publisher`); the request, the epoch and the client key expire with
# the answer, after the result TTL. Its first write is one Redis allows when out of memory (a
# ZREM): a script's later writes are then allowed too, so an answer is written, and its query
# compacted, even by a Redis at its maxmemory (which compaction relieves).
# The bytes the ingress reserved for its search are given back (`give_back`).
# KEYS: lease, epoch, reply, answers, in-flight, active, client in-flight, inbox, request,
# checkpoint, client key, sent ids, cancelled jobs, tree, tree record, reserved, reserved total.
# ARGV: owner, epoch, encoded answer, query id, TTL s, tree record ("": no tree), the search's
# keys' TTL s. -> 1, 0 or -1, as CHECKPOINT
ANSWER = (
    SINCE
    + GIVE_BACK
    + FENCED
    + """
local fence = fenced(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if fence ~= 1 then return fence end
redis.call('ZREM', KEYS[5], ARGV[4])
redis.call('ZREM', KEYS[7], ARGV[4])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[6], ARGV[4])
give_back(KEYS[16], KEYS[17], ARGV[4])
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'EX', ARGV[5]) then
  redis.call('XADD', KEYS[4], 'MINID', since(ARGV[5]), '*', 'e', ARGV[3])
  if ARGV[6] ~= '' then
    redis.call('SET', KEYS[15], ARGV[6], 'EX', ARGV[5])
    redis.call('DEL', KEYS[14])
  end
end
for _, i in ipairs({8, 10, 12, 13}) do redis.call('EXPIRE', KEYS[i], ARGV[7]) end
for _, i in ipairs({2, 9, 11}) do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
return 1
"""
)

# A question that cannot be searched gets a failed answer, so its client is told and its
# in-flight place freed; whatever a coordinator took for it is let go: what only a search
# reads expires soon, the rest with the answer. It first writes as ANSWER does, for the same reason.
# KEYS: reply, answers, in-flight, client in-flight, request, active, lease, epoch, inbox,
# checkpoint, client key, sent ids, cancelled jobs, reserved, reserved total. ARGV: encoded
# answer, query id, TTL s, the search's keys' TTL s. -> 1
REJECT = (
    SINCE
    + GIVE_BACK
    + """
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('ZREM', KEYS[6], ARGV[2])
redis.call('DEL', KEYS[7])
give_back(KEYS[14], KEYS[15], ARGV[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3]) then
  redis.call('XADD', KEYS[2], 'MINID', since(ARGV[3]), '*', 'e', ARGV[1])
end
for _, i in ipairs({9, 10, 12, 13}) do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
for _, i in ipairs({5, 8, 11}) do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return 1
"""
)

# The reserves of one partition recounted (`reserve`): an entry whose query is no longer in flight
# is dropped (an ingress newer than the coordinator that answered it, a question given up on
# unread), and the total set to what the rest hold, so that no drift outlives a round. Its first
# write is an HDEL or the SET: under OOM it may be refused, and runs again the next round.
# KEYS: reserved, reserved total, in-flight. -> the total
RECOUNT = """
local total = 0
for _, id in ipairs(redis.call('HKEYS', KEYS[1])) do
  if redis.call('ZSCORE', KEYS[3], id) then
    total = total + tonumber(redis.call('HGET', KEYS[1], id))
  else
    redis.call('HDEL', KEYS[1], id)
  end
end
redis.call('SET', KEYS[2], total)
return total
"""

# A query Redis lost, about to be searched again from the request its coordinator holds: stored,
# counted in flight and its reserve held again, and due for adoption (active at 0), its client
# key kept again first — unless a question posted again under the key since holds it: then the
# same question is searched there, and this one is not searched a second time (the caller
# answers it as superseded; its request is stored so that its answer can be read).
# KEYS: client key, request, in-flight, client in-flight, reserved, reserved total, active.
# ARGV: client key record, request, now ms, reserve bytes, key backstop s, query id.
# -> the query id that supersedes it, or ''
RESTORE = """
redis.call('SET', KEYS[2], ARGV[2], 'NX')
local existing = redis.call('GET', KEYS[1])
if existing then
  local qid, hash = string.match(existing, '^([^|]*)|(.*)$')
  if qid ~= ARGV[6] and hash == string.match(ARGV[1], '|(.*)$') then return qid end
else
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[5])
end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[6])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[6])
if redis.call('HSETNX', KEYS[5], ARGV[6], ARGV[4]) == 1 then redis.call('INCRBY', KEYS[6], ARGV[4]) end
if not redis.call('ZSCORE', KEYS[7], ARGV[6]) then redis.call('ZADD', KEYS[7], 0, ARGV[6]) end
return ''
"""

# A query's node events appended to its tree stream (trimmed to the events a watcher reads,
# expiring with the answer), written even by a Redis at its maxmemory: the first write is the
# EXPIRE, which Redis allows there. KEYS: tree. ARGV: TTL s, events kept, then each event.
TREE = """
redis.call('EXPIRE', KEYS[1], ARGV[1])
for i = 3, #ARGV do redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'e', ARGV[i]) end
return redis.call('EXPIRE', KEYS[1], ARGV[1])
"""
