"""The Lua scripts behind the Redis stores: each runs atomically on the server, one call per script.

They restate ``guard.stores._rules`` in Lua, because the read-decide-write must happen inside
Redis to be atomic across hosts:

- an entry lives *through* its deadline: it is expired once ``deadline < now``;
- a claim is stale once ``leased_at + lease < TIME``, on the server's clock (``redis.call('TIME')``,
  one clock for every client, which none of them can step); expired results are free, and stale claims
  are too unless the caller says it may not take them (``take_stale``: its backend cannot dedupe);
- a decision after ``expires_at`` is EXPIRED and attributed to nobody.

Other times are the caller's ``now`` (ARGV), and deadlines are stored as
hash fields written by Python with ``repr`` so they read back exactly. Each key also gets a
Redis TTL (``PEXPIRE``, in ms computed from the same deadline plus a grace period) so Redis alone
keeps memory bounded; inside that TTL the stored deadline decides.

Lua numbers are doubles, as Python floats are, so the comparisons agree with the other backends.
Scripts that touch keys they derive (approvals and their proposal index) are meant for a single
Redis server or a replicated primary, not Redis Cluster.
"""

from __future__ import annotations

__all__ = [
    "ADD_WITHIN",
    "APPROVAL_CREATE",
    "APPROVAL_DECIDE",
    "APPROVAL_DECIDE_CLAIM",
    "APPROVAL_FILE",
    "APPROVAL_FIND_PENDING",
    "APPROVAL_PURGE",
    "CEILINGS",
    "CEILINGS_CLAIM",
    "CLAIM",
    "COMPLETE",
    "DEADLINE_PURGE",
    "INCR",
    "RELEASE",
    "RESET",
    "TALLY",
]

# The claim: ``record`` the key's hash, ``lock`` the lock it takes (nil: none), ``a`` its arguments:
# fingerprint, now, lease, expires_at (claim_deadline), ttl_ms, take_stale (1 or 0), the unprefixed
# key. Returns {state, result, holder} ('' where none). A stale claim is left alone unless taken;
# a lock held by another key answers instead (``_rules.lock_outcome``: its stale claims are never
# taken), writing nothing.
_CLAIM = """
local function claim(record, lock, a)
    local now, lease = tonumber(a[2]), tonumber(a[3])
    local time = redis.call('TIME')  -- the lease clock; kept as text so it reads back exactly
    local leased_at = time[1] .. '.' .. string.format('%06d', tonumber(time[2]))
    local function refusal(key, take_stale)
        local rec = redis.call('HMGET', key, 'fingerprint', 'result', 'leased_at', 'expires_at')
        if not rec[1] then return nil end
        if not rec[2] then
            if rec[3] and tonumber(rec[3]) + lease >= tonumber(leased_at) then
                if rec[1] == a[1] then return 'in_flight' end
                return 'conflict'
            end
            if not take_stale then
                if rec[1] == a[1] then return 'stale' end
                return 'conflict'
            end
        elseif tonumber(rec[4]) >= now then
            if rec[1] ~= a[1] then return 'conflict' end
            return 'completed', rec[2]
        end
        return nil
    end
    local state, result = refusal(record, a[6] == '1')
    if state then return {state, result or '', ''} end
    if lock then
        local holder = redis.call('HGET', lock, 'holder')
        if holder ~= a[7] then
            state, result = refusal(lock, false)
            if state then return {state, result or '', holder or ''} end
        end
        redis.call('DEL', lock)
        redis.call('HSET', lock, 'fingerprint', a[1], 'claimed_at', a[2],
            'leased_at', leased_at, 'expires_at', a[4], 'holder', a[7])
        redis.call('PEXPIRE', lock, a[5])
    end
    redis.call('DEL', record)
    redis.call('HSET', record, 'fingerprint', a[1], 'claimed_at', a[2],
        'leased_at', leased_at, 'expires_at', a[4])
    if lock then redis.call('HSET', record, 'lock', lock) end
    redis.call('PEXPIRE', record, a[5])
    return {'claimed', '', ''}
end
"""

# KEYS[1] record, KEYS[2] the lock it takes (optional); ARGV the claim's arguments (``_CLAIM``).
CLAIM = (
    _CLAIM
    + """
return claim(KEYS[1], KEYS[2], ARGV)
"""
)

# The in-flight lock the record KEYS[1] holds, if it still holds it (ARGV[n] its unprefixed key).
_HELD = """
local function held(n)
    local lock = redis.call('HGET', KEYS[1], 'lock')
    if lock and redis.call('HGET', lock, 'holder') == ARGV[n]
        and redis.call('HEXISTS', lock, 'result') == 0 then return lock end
    return nil
end
"""

# KEYS[1] record; ARGV fingerprint, result, now, expires_at (= now + ttl), ttl_ms, the unprefixed
# key. An upsert: a claimed key keeps its claimed_at, a new one gets now. The lock it holds keeps
# an unknown outcome (``_rules.outcome_unknown``: the mark, then cjson) and is deleted on a known one.
COMPLETE = (
    _HELD
    + """
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'result', ARGV[2], 'expires_at', ARGV[4])
redis.call('HSETNX', KEYS[1], 'claimed_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local lock = held(6)
if lock then
    local ok, saved = false, nil
    if string.find(ARGV[2], '"outcome":"unknown"', 1, true) then
        ok, saved = pcall(cjson.decode, ARGV[2])
    end
    if ok and type(saved) == 'table' and saved['outcome'] == 'unknown' then
        redis.call('HSET', lock, 'result', ARGV[2], 'expires_at', ARGV[4])
        redis.call('PEXPIRE', lock, ARGV[5])
    else
        redis.call('DEL', lock)
    end
end
"""
)

# KEYS[1] record; ARGV the unprefixed key. Deletes only an in-flight claim, and the lock it holds:
# a completed result must keep replaying.
RELEASE = (
    _HELD
    + """
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], 'result') == 0 then
    local lock = held(1)
    if lock then redis.call('DEL', lock) end
    redis.call('DEL', KEYS[1])
end
"""
)

# KEYS[1] counter. A script, not a plain DEL, so it can be sent unawaited as EVAL like the others.
RESET = """
redis.call('DEL', KEYS[1])
"""

# KEYS the records to check; ARGV now. Deletes those whose ``expires_at`` passed; returns how many.
# Used by the idempotency and counter stores, whose records share the field name. An in-flight
# claim also waits ``ABANDONED_RETENTION`` on the server's clock: a caller's clock far ahead must
# not delete a live claim (its key would then be free for a second write).
DEADLINE_PURGE = """
local time = redis.call('TIME')
local abandoned = tonumber(time[1]) - 86400  -- _rules.ABANDONED_RETENTION
local function live_claim(key)
    if redis.call('HEXISTS', key, 'result') == 1 then return false end
    local leased_at = redis.call('HGET', key, 'leased_at')
    return leased_at and tonumber(leased_at) >= abandoned
end
local removed = 0
for _, key in ipairs(KEYS) do
    local deadline = redis.call('HGET', key, 'expires_at')
    if deadline and tonumber(deadline) < tonumber(ARGV[1]) and not live_claim(key) then
        redis.call('DEL', key)
        removed = removed + 1
    end
end
return removed
"""

# Add to a counter: an expired one restarts from zero, as if purged. Returns the new value: a
# number while it is below 2**53, which a double (Lua's only number) holds exactly, and past that
# the hash's text (HINCRBY keeps 64-bit integers exact in the hash, but its reply reaches Lua as a
# double, which rounds past 2**53: returning it rounded was a defect of the first INCR). Three
# server calls for a counter in that range: every call inside a script costs the server more
# than the work it does.
_BUMP = """
local function exact(x)  -- an integer a double holds exactly
    return x and x > -2^53 and x < 2^53 and x == math.floor(x)
end
local function bump(key, amount, now, expires_at, ttl_ms)
    local rec = redis.call('HMGET', key, 'value', 'expires_at')
    local live = rec[1] and rec[2] and tonumber(rec[2]) >= now
    local before, add = 0, tonumber(amount)
    if live then before = tonumber(rec[1]) end
    if exact(before) and exact(add) and exact(before + add) then
        local value = before + add
        redis.call('HSET', key, 'value', string.format('%d', value), 'expires_at', expires_at)
        redis.call('PEXPIRE', key, ttl_ms)
        return value
    end
    -- Past 2**53, or not an integer (HINCRBY refuses it, as it always did): the hash adds.
    if not live then redis.call('HSET', key, 'value', 0) end
    redis.call('HINCRBY', key, 'value', amount)
    redis.call('HSET', key, 'expires_at', expires_at)
    redis.call('PEXPIRE', key, ttl_ms)
    return redis.call('HGET', key, 'value')
end
"""

# KEYS[1] counter; ARGV amount, now, expires_at (= now + ttl), ttl_ms. Returns the new value
# (``_BUMP``).
INCR = (
    _BUMP
    + """
return bump(KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4])
"""
)

# KEYS the counters to add to, then those to read; ARGV how many to add to, now, then amount,
# expires_at and ttl_ms per counter added to. Returns the new values, then the values read (0
# when absent or expired), in KEYS order: numbers below 2**53, text past it, so 64-bit values
# stay exact.
TALLY = (
    _BUMP
    + """
local added, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 1, added do
    local at = 3 * i
    out[i] = bump(KEYS[i], ARGV[at], now, ARGV[at + 1], ARGV[at + 2])
end
for i = added + 1, #KEYS do
    local rec = redis.call('HMGET', KEYS[i], 'value', 'expires_at')
    if rec[1] and rec[2] and tonumber(rec[2]) >= now then out[i] = rec[1] else out[i] = 0 end
end
return out
"""
)

# Count (add 1 to) or read each counter of ``keys`` in order, stopping after the first whose value
# is over its limit (``CounterStore.ceilings``); ``a`` holds now, then limit, expires_at and ttl_ms
# per counter (expires_at '' for a counter only read). Returns the values reached, and whether
# every counter was reached with none over its limit.
_COUNT = """
local function count(keys, a)
    local now = tonumber(a[1])
    local out = {}
    for i = 1, #keys do
        local at = 3 * i - 1
        local value
        if a[at + 1] == '' then
            local rec = redis.call('HMGET', keys[i], 'value', 'expires_at')
            value = '0'
            if rec[1] and rec[2] and tonumber(rec[2]) >= now then value = rec[1] end
        else
            value = bump(keys[i], 1, now, a[at + 1], a[at + 2])
        end
        out[i] = value
        if tonumber(value) > tonumber(a[at]) then return out, false end
    end
    return out, true
end
"""

# KEYS the counters, in order; ARGV now, then limit, expires_at and ttl_ms per counter. Returns the
# values reached (``_COUNT``).
CEILINGS = (
    _BUMP
    + _COUNT
    + """
local out = count(KEYS, ARGV)
return out
"""
)

# KEYS the n counters, then the claim's record and the lock it takes (optional); ARGV n, then
# CEILINGS's ARGV, then CLAIM's. Counts the ceilings and, only if none is over its limit, claims
# (``RedisIdempotencyStore.claim_after``). Returns {values reached, the claim's reply or {}}.
CEILINGS_CLAIM = (
    _BUMP
    + _COUNT
    + _CLAIM
    + """
local n = tonumber(ARGV[1])
local counters, counting, claiming = {}, {}, {}
for i = 1, n do counters[i] = KEYS[i] end
for i = 2, 3 * n + 2 do counting[i - 1] = ARGV[i] end
for i = 3 * n + 3, #ARGV do claiming[#claiming + 1] = ARGV[i] end
local out, under = count(counters, counting)
if not under then return {out, {}} end
return {out, claim(KEYS[n + 1], KEYS[n + 2], claiming)}
"""
)

# KEYS[1] counter; ARGV amount, limit, now, expires_at, ttl_ms. Returns 1 if added, else 0;
# a refusal leaves value and expiry untouched.
ADD_WITHIN = """
local rec = redis.call('HMGET', KEYS[1], 'value', 'expires_at')
local current = 0
if rec[1] and tonumber(rec[2]) >= tonumber(ARGV[3]) then current = tonumber(rec[1]) end
if current + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'value', current + tonumber(ARGV[1]), 'expires_at', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

# Retention after expiry or decision, if later: the Lua form of ``_rules.approval_purge_at``.
_PURGE_AT = """
local function purge_at(key, retention)
    local f = redis.call('HMGET', key, 'expires_at', 'decided_at')
    local last = tonumber(f[1])
    if f[2] and tonumber(f[2]) > last then last = tonumber(f[2]) end
    return last + retention
end

local function keep_until(key, index, deadline, now, grace)
    local ttl = math.ceil((deadline - now + grace) * 1000)
    if ttl < 1 then ttl = 1 end
    redis.call('PEXPIRE', key, ttl)
    if redis.call('PTTL', index) < ttl then redis.call('PEXPIRE', index, ttl) end
end
"""

# KEYS[1] action, KEYS[2] its proposal index; ARGV id, created_at, retention, grace, then
# field/value pairs. Returns 0 if the id exists, else 1.
APPROVAL_CREATE = (
    _PURGE_AT
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('RPUSH', KEYS[2], ARGV[1])
local deadline = purge_at(KEYS[1], tonumber(ARGV[3]))
keep_until(KEYS[1], KEYS[2], deadline, tonumber(ARGV[2]), tonumber(ARGV[4]))
return 1
"""
)

# Decide the action under ``key``; ``a`` holds approve ('1' or '0'), by, now, retention, index key
# prefix, grace. Returns the action's fields as they stand afterwards, or nil if unknown.
_DECIDE = """
local function decide(key, a)
    local f = redis.call('HMGET', key, 'state', 'expires_at', 'proposal_key')
    if not f[1] then return nil end
    if f[1] ~= 'pending' then return redis.call('HGETALL', key) end
    local now = tonumber(a[3])
    if tonumber(f[2]) < now then
        redis.call('HSET', key, 'state', 'expired', 'decided_at', a[3])
    else
        local state = 'denied'
        if a[1] == '1' then state = 'approved' end
        redis.call('HSET', key, 'state', state, 'decided_by', a[2], 'decided_at', a[3])
    end
    local deadline = purge_at(key, tonumber(a[4]))
    keep_until(key, a[5] .. f[3], deadline, now, tonumber(a[6]))
    return redis.call('HGETALL', key)
end
"""

# KEYS[1] action; ARGV ``_DECIDE``'s. The action's fields afterwards, or nil if unknown.
APPROVAL_DECIDE = (
    _PURGE_AT
    + _DECIDE
    + """
return decide(KEYS[1], ARGV)
"""
)

# KEYS[1] action, then the claim's record and the lock it takes (optional); ARGV ``_DECIDE``'s six,
# then ``_CLAIM``'s. Decides and, only if the action stands approved afterwards, claims
# (``RedisApprovalStore.decide_then_claim``). Returns {the fields, the claim's reply or {}}, or nil.
APPROVAL_DECIDE_CLAIM = (
    _PURGE_AT
    + _DECIDE
    + _CLAIM
    + """
local deciding, claiming = {}, {}
for i = 1, 6 do deciding[i] = ARGV[i] end
for i = 7, #ARGV do claiming[#claiming + 1] = ARGV[i] end
local fields = decide(KEYS[1], deciding)
if not fields then return nil end
if redis.call('HGET', KEYS[1], 'state') ~= 'approved' then return {fields, {}} end
return {fields, claim(KEYS[2], KEYS[3], claiming)}
"""
)

# The newest unexpired pending action's key in the proposal index ``index``, or nil; ids whose
# action Redis already expired are dropped from the index on the way.
_PENDING = """
local function pending(index, now, prefix)
    local ids = redis.call('LRANGE', index, 0, -1)
    for i = #ids, 1, -1 do
        local key = prefix .. ids[i]
        local f = redis.call('HMGET', key, 'state', 'expires_at')
        if not f[1] then
            redis.call('LREM', index, 0, ids[i])
        elseif f[1] == 'pending' and tonumber(f[2]) >= now then
            return key
        end
    end
    return nil
end
"""

# KEYS[1] proposal index; ARGV now, action key prefix. The newest unexpired pending action's
# fields, or nil.
APPROVAL_FIND_PENDING = (
    _PENDING
    + """
local key = pending(KEYS[1], tonumber(ARGV[1]), ARGV[2])
if key then return redis.call('HGETALL', key) end
return nil
"""
)

# KEYS[1] the new action, KEYS[2] its proposal index; ARGV now, action key prefix, then
# APPROVAL_CREATE's ARGV. The pending action found (its fields), else the new one created: {} if
# created, 0 if its id exists (``ApprovalStore.file``).
APPROVAL_FILE = (
    _PENDING
    + _PURGE_AT
    + """
local key = pending(KEYS[2], tonumber(ARGV[1]), ARGV[2])
if key then return redis.call('HGETALL', key) end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
redis.call('RPUSH', KEYS[2], ARGV[3])
local deadline = purge_at(KEYS[1], tonumber(ARGV[5]))
keep_until(KEYS[1], KEYS[2], deadline, tonumber(ARGV[4]), tonumber(ARGV[6]))
return {}
"""
)

# KEYS the actions to check; ARGV now, retention, index key prefix. Deletes those past retention,
# and their index entries; returns how many.
APPROVAL_PURGE = (
    _PURGE_AT
    + """
local removed = 0
for _, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 1 and purge_at(key, tonumber(ARGV[2])) < tonumber(ARGV[1]) then
        local f = redis.call('HMGET', key, 'id', 'proposal_key')
        redis.call('DEL', key)
        redis.call('LREM', ARGV[3] .. f[2], 0, f[1])
        removed = removed + 1
    end
end
return removed
"""
)
