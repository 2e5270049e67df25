"""The mailbox's one Lua script: every channel operation as one atomic step on one app's keys.

KEYS[1] is the app's key prefix `burrow:mailbox:{<app>}:`; every key the script touches starts with it,
so in a Redis Cluster they all live in the app's slot. ARGV[1] is a JSON array A describing one op (built
by redis_batch.py, and for touch and prune by store_redis.py), or an array of such arrays: consecutive
ops of one app, run in order in one call (fewer calls to parse, dispatch and answer), answered by an
array of their replies. A is:

  1 op  2 side  3 now  4 replica  5 op id  6 retry (1: answer from the recorded result if there is one)
  7 max messages per mailbox  8 max mailbox bytes  9 max stored bytes  10 max mailboxes
  11 mailboxes of other apps  12 stored bytes of other apps  13 max mailboxes per connection
  14 n = mailboxes this connection reached, 15..14+n their ids, then the op's own arguments.

Reply: {error code, refusal, fatal, mailbox reached, value, usage JSON, gone JSON, extra...}; error codes
are names in messages.py. Usage records carry the raw sides so Python computes moods as the single
node does. Times stay strings end to end (cjson would round them).

Keys: names (set of nameplates), bylen (canonical nameplates by digit count), np:<name> (hash: mb,
ns, s:<side> = claimed|added), mb:<id> (hash: fn, b, ns, np, s:<side> = opened|added|mood),
msgs:<id> (list of message JSON), subs:<id> (set of replicas subscribed), updated (zset of mailbox
ids by last use), stats (hash: m mailboxes, n nameplates, b body bytes), done:<op id> (a recorded
reply, 5 minutes: '=<number>' for an add, else the reply as JSON). Channel: bus:<replica> (sharded
pub/sub): 'm<index> <id length> <id><json>' for a new message (not to the replica named in the add's
last argument: it delivers from the reply), 'g<id>' for a deleted mailbox.

`app_prefix` names KEYS[1]; APPS (outside every app's slot) lists the app ids seen.
"""

import hashlib

from burrow.common.redis import key

SERVICE = "mailbox"
APPS = key(SERVICE, "apps")  # every app id seen, for pruning and the totals behind the global limits


def app_prefix(app: str) -> str:
    """`burrow:mailbox:{<app>}:`; an app id with braces (or a very long one) is tagged by its hash."""
    tag = app if len(app) <= 200 and "{" not in app and "}" not in app else "h" + hashlib.sha1(app.encode()).hexdigest()
    return key(SERVICE, tag, "")


SCRIPT = r"""
local P = KEYS[1]

-- The op being run and what it has done so far: set by run() for each op and read by the helpers
-- below, which are made once per call rather than once per op.
local A, op, side, now, replica, opid
local max_msgs, max_mb_bytes, max_stored, max_mailboxes, others_mb, others_bytes, max_touched, ntouched
local touched, X, reached, usage, gone

local function result(err, refusal, fatal, value, extra)
  local r = {err or '', refusal or '', fatal and 1 or 0, reached, value or '',
             #usage > 0 and cjson.encode(usage) or '', #gone > 0 and cjson.encode(gone) or ''}
  if extra then for i = 1, #extra do r[#r + 1] = extra[i] end end
  return r
end

local function remember(r)
  redis.call('SET', P .. 'done:' .. opid, cjson.encode(r), 'EX', 300)
  return r
end

local function stat(field) return tonumber(redis.call('HGET', P .. 'stats', field) or '0') end

local function canonical(name) return string.match(name, '^[1-9][0-9]*$') ~= nil end

local function sides_of(key)
  local h, sides = redis.call('HGETALL', key), {}
  local fields = {}
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 2) == 's:' then sides[string.sub(h[i], 3)] = h[i + 1] else fields[h[i]] = h[i + 1] end
  end
  return sides, fields
end

local function check_room(id, exists)  -- exists: does mailbox `id` exist (no id: a new one)
  if id and touched[id] then return nil end
  if max_touched > 0 and ntouched >= max_touched then return {'TOO_MANY_MAILBOXES', 'mailboxes_per_connection'} end
  if not exists then
    if max_mailboxes > 0 and stat('m') + others_mb >= max_mailboxes then return {'SERVER_FULL', 'mailboxes'} end
  end
  return nil
end

local function open_mailbox(id, fn, npname)
  local key = P .. 'mb:' .. id
  local exists = redis.call('EXISTS', key) == 1
  local e = check_room(id, exists)
  if e then return e end
  local ns = 1
  if not exists then  -- created with this side in it: one write
    if npname then
      redis.call('HSET', key, 'fn', fn, 'b', 0, 'ns', 1, 's:' .. side, '1|' .. now .. '|', 'np', npname)
    else
      redis.call('HSET', key, 'fn', fn, 'b', 0, 'ns', 1, 's:' .. side, '1|' .. now .. '|')
    end
    redis.call('HINCRBY', P .. 'stats', 'm', 1)
  elseif redis.call('HSETNX', key, 's:' .. side, '1|' .. now .. '|') == 1 then
    ns = redis.call('HINCRBY', key, 'ns', 1)
  else
    ns = tonumber(redis.call('HGET', key, 'ns'))
  end
  if not touched[id] then touched[id] = true; ntouched = ntouched + 1 end
  reached = id
  redis.call('ZADD', P .. 'updated', now, id)
  if ns > 2 then return {'CROWDED'} end
  return nil
end

local function delete_nameplate(name, pruned)
  local key = P .. 'np:' .. name
  local sides = sides_of(key)
  redis.call('DEL', key)
  redis.call('SREM', P .. 'names', name)
  if canonical(name) then redis.call('HINCRBY', P .. 'bylen', #name, -1) end
  redis.call('HINCRBY', P .. 'stats', 'n', -1)
  usage[#usage + 1] = {k = 'nameplate', sides = sides, pruned = pruned}
end

local function delete_mailbox(id, pruned)
  local key = P .. 'mb:' .. id
  local sides, fields = sides_of(key)
  local np = fields['np']
  if np and redis.call('HGET', P .. 'np:' .. np, 'mb') == id then delete_nameplate(np, pruned) end
  local n = redis.call('LLEN', P .. 'msgs:' .. id)
  local bytes = tonumber(fields['b'] or '0')
  redis.call('DEL', key, P .. 'msgs:' .. id)
  redis.call('ZREM', P .. 'updated', id)
  redis.call('HINCRBY', P .. 'stats', 'm', -1)
  if bytes ~= 0 then redis.call('HINCRBY', P .. 'stats', 'b', -bytes) end  -- Redis refuses '-0'
  local subs = redis.call('SMEMBERS', P .. 'subs:' .. id)
  redis.call('DEL', P .. 'subs:' .. id)
  for _, r in ipairs(subs) do redis.call('SPUBLISH', P .. 'bus:' .. r, 'g' .. id) end
  gone[#gone + 1] = id
  usage[#usage + 1] = {k = 'mailbox', fn = fields['fn'], n = n, b = bytes, sides = sides, pruned = pruned}
end

local function claim_nameplate(name, new_id)
  local key = P .. 'np:' .. name
  local got = redis.call('HMGET', key, 'mb', 'ns', 's:' .. side)
  local mbid, ns, s = got[1], 1, got[3]
  if not mbid then  -- created with this side in it: one write
    local e = check_room(nil, false)
    if e then return nil, e end
    mbid = new_id
    redis.call('HSET', key, 'mb', mbid, 'ns', 1, 's:' .. side, '1|' .. now)
    redis.call('SADD', P .. 'names', name)
    if canonical(name) then redis.call('HINCRBY', P .. 'bylen', #name, 1) end
    redis.call('HINCRBY', P .. 'stats', 'n', 1)
  elseif not s then
    redis.call('HSET', key, 's:' .. side, '1|' .. now)
    ns = redis.call('HINCRBY', key, 'ns', 1)
  elseif string.sub(s, 1, 1) == '0' then
    return nil, {'RECLAIMED'}
  else
    ns = tonumber(got[2])
  end
  local e = open_mailbox(mbid, 1, name)
  if e then return nil, e end
  if ns > 2 then return nil, {'CROWDED'} end
  return mbid
end

local LO, HI = {1, 10, 100}, {9, 99, 999}

local function free_nameplate()
  math.randomseed(tonumber(A[X]))
  local names = P .. 'names'
  for size = 1, 3 do
    local lo, hi = LO[size], HI[size]
    local free = (hi - lo + 1) - tonumber(redis.call('HGET', P .. 'bylen', size) or '0')
    if free > 0 then
      if free * 4 >= hi - lo + 1 then
        while true do
          local name = tostring(math.random(lo, hi))
          if redis.call('SISMEMBER', names, name) == 0 then return name end
        end
      end
      local cands = {}
      for i = lo, hi do
        local name = tostring(i)
        if redis.call('SISMEMBER', names, name) == 0 then cands[#cands + 1] = name end
      end
      return cands[math.random(1, #cands)]
    end
  end
  for _ = 1, 1000 do
    local name = tostring(math.random(1000, 999999))
    if redis.call('SISMEMBER', names, name) == 0 then return name end
  end
  return nil
end

local function run(a)  -- one op; its reply
  A = a
  op, side, now, replica, opid = A[1], A[2], A[3], A[4], A[5]
  max_msgs, max_mb_bytes, max_stored = tonumber(A[7]), tonumber(A[8]), tonumber(A[9])
  max_mailboxes, others_mb, others_bytes = tonumber(A[10]), tonumber(A[11]), tonumber(A[12])
  max_touched, ntouched = tonumber(A[13]), tonumber(A[14])
  touched = {}
  for i = 1, ntouched do touched[A[14 + i]] = true end
  X = 15 + ntouched
  reached, usage, gone = '', {}, {}

  if A[6] == '1' then
    local done = redis.call('GET', P .. 'done:' .. opid)
    if done then  -- '=<n>': an add's number (the common record, kept small); else a whole reply as JSON
      if string.sub(done, 1, 1) == '=' then return result(nil, nil, false, tonumber(string.sub(done, 2))) end
      return cjson.decode(done)
    end
  end

  if op == 'list' then
    return result(nil, nil, false, '', redis.call('SMEMBERS', P .. 'names'))

  elseif op == 'allocate' then
    local name = free_nameplate()
    if not name then return result('NO_NAMEPLATES', 'nameplates', true) end
    local _, e = claim_nameplate(name, A[X + 1])
    if e then return result(e[1], e[2]) end
    return remember(result(nil, nil, false, name))

  elseif op == 'claim' then
    local mbid, e = claim_nameplate(A[X], A[X + 1])
    if e then return result(e[1], e[2]) end
    return result(nil, nil, false, mbid)

  elseif op == 'release' then
    local key = P .. 'np:' .. A[X]
    local s = redis.call('HGET', key, 's:' .. side)
    if s then
      redis.call('HSET', key, 's:' .. side, '0' .. string.sub(s, 2))
      local sides = sides_of(key)
      for _, v in pairs(sides) do
        if string.sub(v, 1, 1) == '1' then return result() end
      end
      delete_nameplate(A[X], false)
      return remember(result())
    end
    return result()

  elseif op == 'open' then
    local id = A[X]
    local e = open_mailbox(id, 0, nil)
    if e then return result(e[1], e[2]) end
    redis.call('SADD', P .. 'subs:' .. id, replica)
    return result(nil, nil, false, '', redis.call('LRANGE', P .. 'msgs:' .. id, 0, -1))

  elseif op == 'add' then
    local id = A[X]
    local key = P .. 'mb:' .. id
    local b = redis.call('HGET', key, 'b')  -- every mailbox has it: none means no mailbox
    if not b then return result('MUST_OPEN') end
    local n = redis.call('LLEN', P .. 'msgs:' .. id)
    if max_msgs > 0 and n >= max_msgs then return result('MAILBOX_FULL', 'messages_per_mailbox') end
    local size, blen = tonumber(A[X + 2]), tonumber(A[X + 3])
    if max_mb_bytes > 0 and tonumber(b) + size > max_mb_bytes then
      return result('MAILBOX_FULL', 'mailbox_bytes')
    end
    if max_stored > 0 and stat('b') + others_bytes + size > max_stored then
      return result('SERVER_FULL', 'stored_bytes')
    end
    redis.call('RPUSH', P .. 'msgs:' .. id, A[X + 1])
    redis.call('HINCRBY', key, 'b', blen)
    redis.call('HINCRBY', P .. 'stats', 'b', blen)
    redis.call('ZADD', P .. 'updated', now, id)
    local payload = 'm' .. n .. ' ' .. #id .. ' ' .. id .. A[X + 1]
    for _, r in ipairs(redis.call('SMEMBERS', P .. 'subs:' .. id)) do
      if r ~= A[X + 4] then redis.call('SPUBLISH', P .. 'bus:' .. r, payload) end  -- that replica delivers it itself
    end
    redis.call('SET', P .. 'done:' .. opid, '=' .. n, 'EX', 300)  -- a retry after a lost reply must not add it twice
    return result(nil, nil, false, n)

  elseif op == 'close' then
    local id = A[X]
    local key = P .. 'mb:' .. id
    if A[X + 2] ~= '1' then  -- subscribed: a mailbox gone meanwhile has no side below, so nothing to do
      local e = open_mailbox(id, 0, nil)
      if e then return result(e[1], e[2]) end
    end
    local s = redis.call('HGET', key, 's:' .. side)
    if s then
      local added = string.match(s, '^.|([^|]*)|')
      redis.call('HSET', key, 's:' .. side, '0|' .. added .. '|' .. A[X + 1])
      local sides = sides_of(key)
      for _, v in pairs(sides) do
        if string.sub(v, 1, 1) == '1' then return result() end
      end
      delete_mailbox(id, false)
      return remember(result())
    end
    return result()

  elseif op == 'touch' then
    for i = X, #A do redis.call('ZADD', P .. 'updated', 'XX', now, A[i]) end
    return result()

  elseif op == 'prune' then
    local old = tonumber(now) - tonumber(A[X])
    for i = X + 2, #A do redis.call('ZADD', P .. 'updated', 'XX', now, A[i]) end
    local ids = redis.call('ZRANGEBYSCORE', P .. 'updated', '-inf', old, 'LIMIT', 0, tonumber(A[X + 1]))
    for _, id in ipairs(ids) do delete_mailbox(id, true) end
    return result(nil, nil, false, #ids)
  end
  return redis.error_reply('unknown mailbox op ' .. tostring(op))
end

local B = cjson.decode(ARGV[1])  -- one JSON array: cheaper to send than many arguments
if type(B[1]) ~= 'table' then return run(B) end
local replies = {}  -- several ops of this app, in order, in one call
for i = 1, #B do replies[i] = run(B[i]) end
return replies
"""
