import type { PostgresServer } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, type TestGateway } from './helpers/gateway.js';
import { chatOnce, type GatewayProcess } from './helpers/process.js';
import { type RedisBehindProxy, startRedisBehindProxy } from './helpers/redis-behind-proxy.js';
import type { TcpProxy } from './helpers/tcp-proxy.js';

let env: RedisBehindProxy;
let pg: PostgresServer;
let proxy: TcpProxy;
let one: GatewayProcess;
let two: TestGateway;
let database: string;

beforeAll(async () => {
  env = await startRedisBehindProxy('gw-budget-stall-');
  ({ pg, proxy, one, two, database } = env);
}, 60_000);

afterAll(() => env?.close());

const LEASE_GROW = 'gw_budget_lease_grow(text, text, bigint, bigint, integer, bigint)';

describe('a budgeted request refused 503 while Redis stalls', () => {
  it('is logged as Redis not answering and the lease failing, not as the store being unreachable', async () => {
    const { key } = await two.createKey({ rateLimitRpm: 1000, budget: 100 });
    expect((await chatOnce(one.url, key)).status).toBe(200);
    // A lease call that fails while the database answers everything else (keys, usage).
    await pg.psql(`ALTER FUNCTION ${LEASE_GROW} RENAME TO gw_budget_lease_grow_away`, database);
    proxy.hold();
    try {
      const refused = await chatOnce(one.url, key);
      const body = (await refused.json()) as { error: { code: string } };
      expect([refused.status, body.error.code]).toEqual([503, 'service_unavailable']);
    } finally {
      proxy.release();
      await pg.psql(`ALTER FUNCTION gw_budget_lease_grow_away(text, text, bigint, bigint, integer, bigint) RENAME TO gw_budget_lease_grow`, database);
    }
    const found = () =>
      one
        .output()
        .split('\n')
        .filter((line) => line.includes('"level":40') && line.includes('answered 503'));
    // The child's log reaches this process through a pipe, after its answer may have.
    await eventually(() => expect(found()).toHaveLength(1));
    const warnings = found();
    const [warning] = warnings as [string];
    expect(warning).not.toContain('store unreachable');
    expect(warning).toContain('budgets cannot be held: Redis did not answer');
    expect(warning).toContain('gw_budget_lease_grow');
  }, 30_000);
});

describe('a resume refused 503 while Redis stalls', () => {
  it('is logged as the resume buffer (Redis) not answering, not as the store being unreachable', async () => {
    const { key } = await two.createKey({ rateLimitRpm: 1000 });
    const body = { model: 'mistral/small', stream: true, messages: [{ role: 'user', content: 'resume me' }] };
    const post = (url: string, headers: Record<string, string> = {}) =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const streamed = await post(two.url);
    const text = await streamed.text();
    const id = /^id: (\S+)$/m.exec(text)?.[1];
    expect(id).toMatch(/^req_\w+:\d+$/);
    const streamId = (id as string).split(':')[0] as string;
    proxy.hold();
    try {
      const refused = await post(one.url, { 'last-event-id': `${streamId}:0` });
      const answer = (await refused.json()) as { error: { message: string } };
      expect([refused.status, answer.error.message]).toEqual([503, 'The stream resume buffer cannot be read right now; retry shortly.']);
    } finally {
      proxy.release();
    }
    const found = () =>
      one
        .output()
        .split('\n')
        .filter((line) => line.includes('"level":40') && line.includes('answered 503') && !line.includes('budgets cannot be held'));
    await eventually(() => expect(found()).toHaveLength(1));
    const warnings = found();
    const [warning] = warnings as [string];
    expect(warning).not.toContain('store unreachable');
    expect(warning).toContain('stream resume buffer (Redis) unreachable');
    expect(warning).toContain('Command timed out');
  }, 30_000);
});
