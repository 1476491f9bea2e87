import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, eventually, type TestGateway } from './helpers/gateway.js';
import type { GatewayProcess } from './helpers/process.js';
import { type RedisBehindProxy, startRedisBehindProxy } from './helpers/redis-behind-proxy.js';
import type { TcpProxy } from './helpers/tcp-proxy.js';

let env: RedisBehindProxy;
let proxy: TcpProxy;
let one: GatewayProcess;
let two: TestGateway;

beforeAll(async () => {
  env = await startRedisBehindProxy('gw-slow-redis-');
  ({ proxy, one, two } = env);
}, 60_000);

afterAll(() => env?.close());

const admin = (method: string, path: string) => fetch(`${one.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
const bearer = (key: string) => `Bearer ${key}`;
/** Whether instance two, at this moment, still takes the key (its cache, no request through Redis). */
const twoTakes = async (key: string) => {
  try {
    await two.gateway.services.auth.authenticate(bearer(key));
    return true;
  } catch {
    return false;
  }
};

const warnings = (id: string) =>
  one
    .output()
    .split('\n')
    .filter((line) => line.includes('"level":40') && line.includes(id));

/** A key both instances know. */
async function knownKey(): Promise<{ id: string; key: string }> {
  const { id, key } = await two.createKey({ rateLimitRpm: 1000 });
  expect((await fetch(`${one.url}/v1/models`, { headers: { authorization: bearer(key) } })).status).toBe(200);
  expect(await twoTakes(key)).toBe(true);
  return { id, key };
}

describe('a revocation while Redis is slow or silent', () => {
  it('with every command 800 ms late, answers once the other instance has applied it, not at the publish timeout (500 ms)', async () => {
    const { id, key } = await knownKey();
    proxy.slow(800);
    try {
      const res = await admin('POST', `/keys/${id}/revoke`);
      // Asked at once: instance two had applied it before the answer.
      expect(await twoTakes(key)).toBe(false);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-propagation')).toBe('confirmed');
      expect(warnings(id)).toEqual([]);
    } finally {
      proxy.slow(0);
    }
  }, 30_000);

  it('with every command 800 ms late, a budget or workspace change answers once the other instance has applied it too', async () => {
    const ws = await two.admin<{ id: string }>('POST', '/workspaces', { name: 'slow', enabledModels: null });
    const { id, key } = await two.createKey({ rateLimitRpm: 1000, workspaceId: ws.body.id });
    expect((await fetch(`${one.url}/v1/models`, { headers: { authorization: bearer(key) } })).status).toBe(200);
    const before = two.gateway.services.auth.authenticate(bearer(key));
    expect(await before).toMatchObject({ budget: null });
    proxy.slow(800);
    try {
      const patched = await fetch(`${one.url}/admin/v1/keys/${id}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ budget: 5 }),
      });
      expect([patched.status, patched.headers.get('x-gateway-propagation')]).toEqual([200, 'confirmed']);
      // Asked at once: instance two reads the key anew, with its budget.
      expect(await two.gateway.services.auth.authenticate(bearer(key))).toMatchObject({ budget: 5 });
      const changed = await fetch(`${one.url}/admin/v1/workspaces/${ws.body.id}`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ enabledModels: ['mistral/small'] }),
      });
      expect([changed.status, changed.headers.get('x-gateway-propagation')]).toEqual([200, 'confirmed']);
      expect(warnings(id)).toEqual([]);
      expect(warnings(ws.body.id)).toEqual([]);
    } finally {
      proxy.slow(0);
    }
    const models = await fetch(`${two.url}/alt/v1/models`, { headers: { authorization: bearer(key) } });
    expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(['mistral/small']);
  }, 30_000);

  it('with Redis silent, answers after 5 s saying it is unconfirmed, logs why, and the change arrives once Redis answers', async () => {
    const { id, key } = await knownKey();
    proxy.hold();
    try {
      const started = performance.now();
      const res = await admin('POST', `/keys/${id}/revoke`);
      expect(performance.now() - started).toBeGreaterThanOrEqual(4_900);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-propagation')).toBe('unconfirmed');
      // The child's log reaches this process through a pipe, after its answer may have.
      await eventually(() => expect(warnings(id).length).toBeGreaterThan(0));
      const [warning, ...more] = warnings(id);
      expect(more).toEqual([]);
      expect(warning).toContain('no other instance confirmed it: Redis did not answer its publish on gw:keys within 5000 ms');
      expect(warning).not.toContain(key);
    } finally {
      proxy.release();
    }
    await eventually(async () => expect(await twoTakes(key)).toBe(false));
  }, 30_000);

  it('with Redis refusing connections, answers at once saying it is unconfirmed, and logs that the publish failed', async () => {
    const { id, key } = await knownKey();
    proxy.cut();
    try {
      const res = await admin('POST', `/keys/${id}/revoke`);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-propagation')).toBe('unconfirmed');
      await eventually(() => expect(warnings(id).join()).toContain('its publish on gw:keys failed (Redis unreachable; it is sent again once Redis is back)'));
    } finally {
      proxy.mend();
    }
    await eventually(async () => expect(await twoTakes(key)).toBe(false), 6_000);
  }, 30_000);
});
