"""Lua scripts of corpus snapshots (core/corpus_snapshot.py) and restores
(core/corpus_restore.py). Each is atomic: what a snapshot reads at its revision, and a
restore's switch from the old corpus to the staged one, happen at one instant for every other
client. Document keys are `ARGV[doc key prefix] .. id`, the prefix taken from RedisKeys.

The switch writes each document exactly as core/document_scripts.py's UPSERT and DELETE do
(hash, id listing, one change-log entry per document), so every replica's follower applies a
restore as it applies any other write.
"""

# Changed ids since a revision, and their state now, together with the revision and the
# active model version: the last step of a consistent read.
READ_CHANGED = """#!lua flags=no-writes
-- KEYS: revision, changes, active model version.
-- ARGV: from revision, most entries to read, document key prefix.
-- Returns {revision, active version or '', status, then id, text, metadata per changed id};
-- status 'ok', 'more' (more than ARGV[2] entries: nothing else returned) or 'gap' (the log
-- does not continue from ARGV[1]). A deleted document's text and metadata are false (nil).
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local active = redis.call('GET', KEYS[3]) or ''
local from = tonumber(ARGV[1])
if current <= from then
  return {current, active, 'ok'}
end
if current - from > tonumber(ARGV[2]) then
  return {current, active, 'more'}
end
local entries = redis.call('XRANGE', KEYS[2], (from + 1) .. '-0', '+')
if #entries == 0 or entries[1][1] ~= (from + 1) .. '-0' then
  return {current, active, 'gap'}
end
local out = {current, active, 'ok'}
local seen = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  local id
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then id = fields[i + 1] end
  end
  if id and not seen[id] then
    seen[id] = true
    local doc = redis.call('HMGET', ARGV[3] .. id, 'text', 'metadata')
    out[#out + 1] = id
    out[#out + 1] = doc[1]
    out[#out + 1] = doc[2]
  end
end
return out
"""

# The one step that changes the corpus in a restore.
SWITCH = """#!lua
-- KEYS: 1 revision, 2 changes, 3 ids, 4 numbers, 5 number counter, 6 restore lock,
--       7 staged texts, 8 staged metadata, 9 ids to apply, 10 last restore.
-- ARGV: 1 lock token, 2 revision the staged comparison started from, 3 document key prefix,
--       4 snapshot name, 5 time (ISO 8601).
-- Makes the live corpus equal to the staged one: every id in ids-to-apply, and every id the
-- change log shows written since ARGV[2] (its comparison may be stale), is compared once
-- more and written as UPSERT or DELETE would. Returns {'ok', upserted, deleted, revision},
-- or {'lost-lock'} / {'gap'} having changed nothing.
if redis.call('GET', KEYS[6]) ~= ARGV[1] then
  return {'lost-lock'}
end
local since = tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current > since then
  local step = 1000
  local start = (since + 1) .. '-0'
  local first = redis.call('XRANGE', KEYS[2], start, start)
  if #first == 0 then
    return {'gap'}
  end
  while true do
    local entries = redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', step)
    for _, entry in ipairs(entries) do
      local fields = entry[2]
      for i = 1, #fields, 2 do
        if fields[i] == 'id' then redis.call('ZADD', KEYS[9], 0, fields[i + 1]) end
      end
    end
    if #entries < step then break end
    start = '(' .. entries[#entries][1]
  end
end
local upserted, deleted = 0, 0
local revision = current
local offset = 0
while true do
  local ids = redis.call('ZRANGE', KEYS[9], offset, offset + 999)
  for _, id in ipairs(ids) do
    local key = ARGV[3] .. id
    local text = redis.call('HGET', KEYS[7], id)
    if text then
      local metadata = redis.call('HGET', KEYS[8], id)
      local live = redis.call('HMGET', key, 'text', 'metadata')
      if live[1] ~= text or live[2] ~= metadata then
        local number = redis.call('HGET', KEYS[4], id)
        if not number then
          number = redis.call('INCR', KEYS[5])
          redis.call('HSET', KEYS[4], id, number)
        end
        revision = redis.call('INCR', KEYS[1])
        redis.call('HSET', key, 'text', text, 'metadata', metadata,
                   'number', number, 'revision', revision)
        redis.call('ZADD', KEYS[3], 0, id)
        redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'upsert', 'id', id, 'number', number)
        upserted = upserted + 1
      end
    else
      local number = redis.call('HGET', key, 'number')
      if number then
        redis.call('DEL', key)
        redis.call('ZREM', KEYS[3], id)
        revision = redis.call('INCR', KEYS[1])
        redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'delete', 'id', id, 'number', number)
        deleted = deleted + 1
      end
    end
  end
  if #ids < 1000 then break end
  offset = offset + 1000
end
redis.call('HSET', KEYS[10], 'snapshot', ARGV[4], 'revision', revision, 'at', ARGV[5])
return {'ok', upserted, deleted, revision}
"""

# The restore lock: renewed and released only by the restore holding it.
RENEW_LOCK = """#!lua
-- KEYS: lock. ARGV: token, ttl ms. 1 if renewed, 0 if the lock is another's or gone.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_LOCK = """#!lua
-- KEYS: lock. ARGV: token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
