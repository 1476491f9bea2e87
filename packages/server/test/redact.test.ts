import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

const PROVIDER_KEY = 'scw-provider-key-7f3a9c2e1d';

let sim: Simulator;
let gw: TestGateway;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0, apiKeys: { scaleway: PROVIDER_KEY } });
  gw = await startGateway({ sim, env: { GW_CIRCUIT_FAILURES: '1000' } });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

describe('secrets in provider errors', () => {
  it('a provider that echoes its key or a bearer token in an error does not pass it on to the client, in either variant', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.setFault({ kind: 'status', status: 500, message: `internal failure; you sent Bearer ${PROVIDER_KEY} (sk-live-abcdef0123456789)` });
    try {
      for (const base of [gw.baseA, gw.baseB]) {
        const res = await fetch(`${base}/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
          body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }] }),
        });
        const text = await res.text();
        expect(res.status).toBeGreaterThanOrEqual(500);
        // The provider's own words stay (they help), its secrets do not.
        expect(text).toContain('internal failure');
        expect(text).not.toContain(PROVIDER_KEY);
        expect(text).not.toContain('sk-live-abcdef0123456789');
        expect(text).toContain('[redacted]');
      }
    } finally {
      sim.providers.scaleway?.clearFaults();
    }
  });

  it("the gateway's own 401 guidance is not taken for a secret: it names the header to send", async () => {
    for (const [headers, start] of [
      [{}, 'Missing API key: send the header Authorization: Bearer gw_live_…'],
      [{ authorization: 'Bearer abc' }, 'Malformed API key: expected Authorization: Bearer gw_live_…'],
    ] as const) {
      for (const base of [gw.baseA, gw.baseB]) {
        const res = await fetch(`${base}/models`, { headers });
        const body = (await res.json()) as { error: { message: string } };
        expect([res.status, body.error.message]).toEqual([401, start]);
      }
    }
  });

  it('a key sent where it is not read (x-api-key, api-key, the URL) or under another scheme is told so, never echoed', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    const basic = `Basic ${Buffer.from(`:${key}`).toString('base64')}`;
    for (const [path, headers, message] of [
      ['/models', { 'x-api-key': key }, "Missing API key: the 'x-api-key' header is not read here; send the key as Authorization: Bearer gw_live_…"],
      ['/models', { 'api-key': key }, "Missing API key: the 'api-key' header is not read here; send the key as Authorization: Bearer gw_live_…"],
      [`/models?api_key=${key}`, {}, expect.stringContaining('Missing API key: a key in the URL is not read here')],
      ['/models', { authorization: basic }, "The Authorization scheme 'Basic' is not taken: expected Authorization: Bearer gw_live_…"],
    ] as const) {
      for (const base of [gw.baseA, gw.baseB]) {
        const res = await fetch(`${base}${path}`, { headers });
        const text = await res.text();
        expect([res.status, (JSON.parse(text) as { error: { message: string } }).error.message]).toEqual([401, message]);
        expect(text).not.toContain(key.slice(8));
      }
    }
    // Only Authorization is read: beside it, another header's key changes nothing.
    const both = await fetch(`${gw.baseA}/models`, { headers: { authorization: `Bearer ${key}`, 'x-api-key': 'gw_live_other' } });
    expect(both.status).toBe(200);
  });
});

describe('what the request log shows of a URL', () => {
  it('takes every query value out but the filters the API reads, and finds a key however it is written', async () => {
    const { urlForLog, redactSecrets } = await import('../src/lib/redact.js');
    const key = 'gw_live_AbCdEfGhIjKlMnOpQrStUv';
    expect(urlForLog(`/v1/models?Authorization=Bearer%20${key}`)).toBe('/v1/models?Authorization=[redacted]');
    expect(urlForLog('/admin/v1/keys/x?access_token=some-admin-token-0123456789&token=abc')).toBe('/admin/v1/keys/x?access_token=[redacted]&token=[redacted]');
    expect(urlForLog('/alt/v1/models?family=mistral&capability=tools')).toBe('/alt/v1/models?family=mistral&capability=tools');
    expect(urlForLog(`/v1/models/%67w_live_AbCdEfGhIjKlMnOp`)).toBe('/v1/models/[redacted]');
    expect(redactSecrets(`k=x${key}`)).toBe('k=x[redacted]');
    // A key id names a key without opening it: kept, so that the log says which key an admin call touched.
    expect(urlForLog('/admin/v1/keys/key_xf_0MMttUxDaLKmq/revoke')).toBe('/admin/v1/keys/key_xf_0MMttUxDaLKmq/revoke');
    expect(redactSecrets('key_live_0123456789abcdefghij')).toBe('[redacted]');
    // Still encoded: a part with no value, a filter's value, a path with a malformed escape beside the key.
    expect(urlForLog('/v1/models?%67w_live_abcdefghijklmnop')).toBe('/v1/models?[redacted]');
    expect(urlForLog('/alt/v1/models?provider=%67w_live_abcdefghijklmnop')).toBe('/alt/v1/models?provider=[redacted]');
    expect(urlForLog('/v1/models/%67w_live_abcdefghijklmnop%')).not.toContain('abcdefghijklmnop');
    expect(urlForLog('/v1/models?Bearer%20abcdefghijklmnopqrstu')).toBe('/v1/models?[redacted]');
  });
});
