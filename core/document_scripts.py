"""The document store's Lua scripts (core/documents.py): each write is one script, so a
document's hash, the id listing and the change-log entry change together or not at all; and one
read, of a search's hits.

They carry the `#!lua` shebang: Redis then refuses a write script up front when it is out of
memory, instead of failing half-way through, and runs the read, flagged no-writes, on a replica
or out of memory alike.
"""

UPSERT = """#!lua
-- KEYS: revision, changes, ids, numbers, number counter, demo marker, then one hash per doc.
-- ARGV: only-if-unseeded flag, then (id, text, metadata JSON) per document.
local first = 7
if ARGV[1] == '1' then
  local seeded = redis.call('EXISTS', KEYS[6]) == 1
  redis.call('SET', KEYS[6], '1')
  if seeded or redis.call('ZCARD', KEYS[3]) > 0 then
    return {}
  end
end
local numbers = {}
local revision = 0
for i = first, #KEYS do
  local j = (i - first) * 3 + 2
  local id = ARGV[j]
  local number = redis.call('HGET', KEYS[4], id)
  if not number then
    number = redis.call('INCR', KEYS[5])
    redis.call('HSET', KEYS[4], id, number)
  end
  revision = redis.call('INCR', KEYS[1])
  redis.call('HSET', KEYS[i], 'text', ARGV[j + 1], 'metadata', ARGV[j + 2],
             'number', number, 'revision', revision)
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'upsert', 'id', id, 'number', number)
  numbers[#numbers + 1] = tonumber(number)
end
numbers[#numbers + 1] = revision
return numbers
"""

DELETE = """#!lua
-- KEYS: revision, changes, ids, then one hash per doc. ARGV: the ids.
-- Returns one 0/1 per id (1 = it existed), then the corpus revision after the call.
local first = 4
local out = {}
for i = first, #KEYS do
  local id = ARGV[i - first + 1]
  local number = redis.call('HGET', KEYS[i], 'number')
  if number then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[3], id)
    local revision = redis.call('INCR', KEYS[1])
    redis.call('XADD', KEYS[2], revision .. '-0', 'op', 'delete', 'id', id, 'number', number)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
out[#out + 1] = tonumber(redis.call('GET', KEYS[1]) or '0')
return out
"""

SET_ANCHORS = """#!lua
-- KEYS: the anchor record. ARGV: expected checksum ('' = absent), checksum, texts, corpus size.
if (redis.call('HGET', KEYS[1], 'checksum') or '') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'checksum', ARGV[2], 'texts', ARGV[3], 'corpus_size', ARGV[4])
return 1
"""

TRIM_CHANGES = """#!lua
-- KEYS: changes, readers, reader deadlines. ARGV: reader, its position, lifetime ms, keep.
-- Records the reader's position (the oldest revision it still needs), forgets readers past
-- their deadline, then trims the log below the oldest position left. That position's own
-- entry stays (a reader checks it), and so do the newest `keep` entries, at least one: an empty
-- read after revision r then means nothing was written after r, never that it was trimmed.
-- Returns the oldest position and the number of entries removed.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[3]), ARGV[1])
for _, reader in ipairs(redis.call('ZRANGE', KEYS[3], '-inf', now_ms, 'BYSCORE')) do
  redis.call('ZREM', KEYS[2], reader)
  redis.call('ZREM', KEYS[3], reader)
end
local oldest = tonumber(redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2])
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #newest == 0 then
  return {oldest, 0}
end
local last = tonumber(string.match(newest[1][1], '^%d+'))
local below = math.min(oldest, last - math.max(tonumber(ARGV[4]), 1) + 1)
if below <= 1 then
  return {oldest, 0}
end
return {oldest, redis.call('XTRIM', KEYS[1], 'MINID', below .. '-0')}
"""

READ = """#!lua flags=no-writes
-- KEYS: one hash per document. ARGV: the fields to read from each.
local rows = {}
for i, key in ipairs(KEYS) do
  rows[i] = redis.call('HMGET', key, unpack(ARGV))
end
return rows
"""
