import type { Redis } from 'ioredis';

// When the life of Redis's data began: Redis's time when a gateway first wrote there, and the run (INFO's run_id) it
// was written in. A restart without persistence or a FLUSHALL takes the mark with the data; a restart from a snapshot
// brings back a mark of its earlier run, which is written anew. The names keep their first user's prefix (idempotency),
// so that instances of earlier builds sharing the Redis read the same mark.
export const DATA_SINCE_KEY = 'gw:idem:since';
export const DATA_RUN_KEY = 'gw:idem:run';

/** Writes the mark if this life of the data has none; returns its age in ms and the run id. */
const MARK = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
local since = tonumber(redis.call('GET', KEYS[1]))
if not since or redis.call('GET', KEYS[2]) ~= run then
  redis.call('SET', KEYS[1], now)
  redis.call('SET', KEYS[2], run)
  since = now
end
return {now - since, run}
`;

type MarkCommand = (since: string, run: string) => Promise<[number, string]>;
const defined = new WeakSet<Redis>();

/** How long ago this life of Redis's data began (marking it now if nothing did yet), and Redis's run id. */
export async function redisDataLife(redis: Redis): Promise<{ ageMs: number; run: string }> {
  if (!defined.has(redis)) {
    redis.defineCommand('gwDataLifeMark', { numberOfKeys: 2, lua: MARK });
    defined.add(redis);
  }
  const mark = (redis as unknown as { gwDataLifeMark: MarkCommand }).gwDataLifeMark;
  const [ageMs, run] = await mark.call(redis, DATA_SINCE_KEY, DATA_RUN_KEY);
  return { ageMs: Number(ageMs), run };
}
