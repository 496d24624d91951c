"""The ingress client's Redis scripts: a submission (`SUBMIT`: its outcomes, `SubmitOutcome`) and
a cancellation (`CANCEL`). `client.IngressClient` registers each once and is the only caller: the
KEYS and ARGV each comment lists are in the order it passes them."""

from __future__ import annotations

from enum import IntEnum

from spex.shared.runtime.data_loss import MARK_FUNCTION

__all__ = ["CANCEL", "SUBMIT", "SubmitOutcome"]


class SubmitOutcome(IntEnum):
    """What the submit script did: the first element of its reply (the second is a query id,
    or how many questions are in flight when refused for that). The script declares each as a
    Lua local of the same name."""

    NEW = 1  # recorded, stored and appended to the ingress stream
    REPEATED = 0  # the client key's question again: the first submission's query id
    BACKLOG_FULL = -1  # refused: the backlog's questions in flight are at its limit
    CLIENT_FULL = -2  # refused: this client's questions in flight are at its limit
    KEY_CONFLICT = -3  # refused: the client key was used for a different question
    ID_TAKEN = -4  # refused: the query id given is some other query's
    DATA_LOST = -5  # refused: a client key not found while Redis's loss of its data stands (`data_loss`)
    MEMORY_FULL = -6  # refused: its search's reserve would pass Redis's room (`reserve`)


# KEYS: submitted, ingress, in-flight, client in-flight, request, data kept, reserved, reserved
# total, data lost, its awaited coordinators. ARGV: query id, payload, backlog limit, client
# limit, client key record (`client_key_record`), now ms, key backstop s, the data-kept token
# this client saw last ('' if none), the bytes its search may hold (`reserve`: counted until
# its answer), the room Redis has for the reserves in all ('': no limit; `services.admission`),
# the longest a loss marked here stands (ms), '1' if the client key is the client's own.
# A new question leaves the data-kept token (its id) if none is there; every reply ends with it.
# A token the client saw and none there now: Redis lost its data, and this is the first to
# notice (`data_loss`): it marks the loss. While a loss stands, a client key not found may be
# one a coordinator is storing again: refused, not taken for new (a second search).
# The client key is kept while the question is searched: the coordinator's answer (or
# rejection) sets it to expire with the answer, so a retry is the same query for as long as
# the answer can be read. Its own TTL (a week) is only a backstop, for a question nothing ever
# answers (an ingress entry a foreign writer corrupted).
SUBMIT = (
    "".join(f"local {outcome.name} = {outcome.value}\n" for outcome in SubmitOutcome)
    + MARK_FUNCTION
    + """
local existing = redis.call('GET', KEYS[1])
if existing then
  local qid, hash = string.match(existing, '^([^|]*)|(.*)$')
  if hash ~= string.match(ARGV[5], '|(.*)$') then return {KEY_CONFLICT, qid} end
  return {REPEATED, qid}
end
if ARGV[8] ~= '' and not redis.call('GET', KEYS[6]) then
  mark_lost(KEYS[9], KEYS[10], KEYS[6], 'ingress', ARGV[11], '', {})
end
if ARGV[12] == '1' and redis.call('EXISTS', KEYS[9]) == 1 then
  return {DATA_LOST, '', redis.call('GET', KEYS[6]) or ''}
end
if redis.call('EXISTS', KEYS[5]) == 1 then return {ID_TAKEN, ARGV[1]} end
local inflight = redis.call('ZCARD', KEYS[3])
if inflight >= tonumber(ARGV[3]) then return {BACKLOG_FULL, tostring(inflight)} end
local mine = redis.call('ZCARD', KEYS[4])
if mine >= tonumber(ARGV[4]) then return {CLIENT_FULL, tostring(mine)} end
local reserved = tonumber(redis.call('GET', KEYS[8]) or '0')
if ARGV[10] ~= '' and reserved + tonumber(ARGV[9]) > tonumber(ARGV[10]) then
  return {MEMORY_FULL, tostring(reserved)}
end
redis.call('SET', KEYS[1], ARGV[5], 'EX', ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
redis.call('SET', KEYS[5], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
redis.call('HSET', KEYS[7], ARGV[1], ARGV[9])
redis.call('INCRBY', KEYS[8], ARGV[9])
redis.call('SET', KEYS[6], ARGV[1], 'NX')
return {NEW, ARGV[1], redis.call('GET', KEYS[6])}
"""
)

# KEYS: request, inbox, answer. ARGV: payload. -> 1, 0 if the query is unknown, or -1 if it
# is answered: it has nothing to cancel (and its answer deleted its inbox: nothing re-creates it).
CANCEL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
redis.call('XADD', KEYS[2], '*', 'e', ARGV[1])
return 1
"""
