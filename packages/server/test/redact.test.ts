import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './helpers/gateway.js';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';

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

/** A chat completion pinned to Scaleway, whose faults the tests set. */
function chatOnScaleway(base: string, key: string, stream = false): Promise<Response> {
  return fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
    body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream }),
  });
}

describe('secrets in provider errors', () => {
  it('a provider that echoes its key or a bearer token in an error does not pass it on to the client, in either variant', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    sim.providers.scaleway?.setFault({ kind: 'status', status: 500, message: `internal failure; you sent Bearer ${PROVIDER_KEY} (sk-live-abcdef0123456789)` });
    try {
      for (const base of [gw.baseA, gw.baseB]) {
        const res = await chatOnScaleway(base, key);
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

  it('a key the cut of a long provider message would split is redacted whole, not passed on by its head', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    // Clients get a provider's first 300 characters: these put the key across that cut, whatever the prefix.
    for (const pad of [276, 284, 290, 296]) {
      for (const [stream, fault] of [
        [false, { kind: 'status', status: 500, message: `${'x'.repeat(pad)}${PROVIDER_KEY} is not allowed` }],
        [true, { kind: 'error_after_200', afterChunks: 1, message: `${'x'.repeat(pad)}${PROVIDER_KEY} is not allowed` }],
      ] as const) {
        sim.providers.scaleway?.setFault({ ...fault, times: 1 });
        const res = await chatOnScaleway(gw.baseA, key, stream);
        const text = await res.text();
        expect(text).toContain('xxxxxxxxxx');
        expect(text).toContain('[redacted]');
        expect(text).not.toContain(PROVIDER_KEY.slice(0, 6));
      }
    }
    sim.providers.scaleway?.clearFaults();
  });

  it('secrets a provider names in the formats of other keys and tokens (URL passwords, api-key headers, JWTs, Basic) are redacted too', async () => {
    const { key } = await gw.createKey({ rateLimitRpm: 1000 });
    // None of these is a configured key: only its shape, or what names it, can find it.
    const secrets = {
      urlPassword: 'PrOxYpAsS0rd42',
      azureHeader: '0f1e2d3c4b5a69788796a5b4c3d2e1f0',
      mistralField: 'q8V2mZr4Lx0TnB7sKd3WfY6hJc1PgA9e',
      openaiProvided: 'Zx81Qw72Er63Ty54Ui45Op36',
      jwt: 'eyJhbGciOiJFZERTQSJ9.eyJwcm9qZWN0IjoiZ3cifQ.c2lnbmF0dXJlMDEyMzQ1Njc4OQ',
      basic: Buffer.from('user:B4s1cS3cr3tPass').toString('base64'),
      queryKey: 'AIzaSyQ-4fakeGoogleKey0123456789',
      bearerColon: 'TokenAfterColon0123456789',
    };
    // Each with the words around it, which stay.
    const messages: [string, string, string][] = [
      [`cannot reach https://proxy:${secrets.urlPassword}@10.9.8.7:8443/v1`, secrets.urlPassword, 'cannot reach https://[redacted]@10.9.8.7'],
      [`headers {"api-key":"${secrets.azureHeader}"}`, secrets.azureHeader, 'headers {"api-key":"[redacted]'],
      [`headers {"x-api-key": "${secrets.mistralField}"}`, secrets.mistralField, '"x-api-key": "[redacted]'],
      [`Incorrect API key provided: ${secrets.openaiProvided}`, secrets.openaiProvided, 'Incorrect API key provided: [redacted]'],
      [`invalid token ${secrets.jwt}`, secrets.jwt, 'invalid token [redacted]'],
      [`Authorization: Basic ${secrets.basic}`, secrets.basic, 'Authorization: [redacted]'],
      [`see https://example.test/v1?alt=json&key=${secrets.queryKey}`, secrets.queryKey, '?alt=json&key=[redacted]'],
      [`Bearer: ${secrets.bearerColon}`, secrets.bearerColon, 'Bearer: [redacted]'],
    ];
    try {
      for (const [message, secret, shown] of messages) {
        sim.providers.scaleway?.setFault({ kind: 'status', status: 500, message, times: 2 });
        for (const base of [gw.baseA, gw.baseB]) {
          const res = await chatOnScaleway(base, key);
          const text = await res.text();
          expect(text).not.toContain(secret);
          expect(text).toContain(shown.replaceAll('"', '\\"'));
        }
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

describe('what the log shows of provider messages', () => {
  const key = 'scw-log-cut-key-0c4e8a1f95';
  let logSim: Simulator;
  let proc: GatewayProcess;
  let dir: string;
  let clientKey: string;

  beforeAll(async () => {
    logSim = await startSimulator({ latencyScale: 0, apiKeys: { scaleway: key } });
    dir = mkdtempSync(join(tmpdir(), 'gw-redact-log-'));
    writeFileSync(join(dir, 'gw.json'), JSON.stringify(logSim.demoConfig()));
    proc = await spawnGateway({ GW_CONFIG: join(dir, 'gw.json'), GW_DATA_DIR: join(dir, 'data'), GW_ADMIN_TOKEN: ADMIN_TOKEN, GW_CIRCUIT_FAILURES: '1000' });
    const created = await fetch(`${proc.url}/admin/v1/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitRpm: 1000 }),
    });
    clientKey = ((await created.json()) as { key: string }).key;
  }, 60_000);
  afterAll(async () => {
    proc?.child.kill('SIGKILL');
    await logSim?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const chat = (base: string, stream: boolean) =>
    fetch(`${proc.url}/${base}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${clientKey}`, 'content-type': 'application/json', 'x-gateway-provider': 'scaleway' },
      body: JSON.stringify({ model: 'meta/llama-3.3-70b', messages: [{ role: 'user', content: 'hi' }], stream }),
    });

  it('a key the cut at 4,000 characters would split is redacted whole', async () => {
    const before = proc.output().length;
    for (const pad of [3976, 3984, 3990, 3996]) {
      logSim.providers.scaleway?.setFault({ kind: 'status', status: 500, message: `${'x'.repeat(pad)}${key} is not allowed`, times: 1 });
      await (await chat('v1', false)).text();
    }
    await new Promise((r) => setTimeout(r, 200));
    const failures = proc
      .output()
      .slice(before)
      .split('\n')
      .filter((l) => l.includes('upstream attempt failed'));
    expect(failures.length).toBe(4);
    for (const line of failures) expect(line).toContain('[redacted]');
    expect(proc.output()).not.toContain(key.slice(0, 6));
  }, 30_000);

  it('a provider that shows the head of its key (its first 10 to 14 characters) passes it neither to the client nor to the log', async () => {
    // A 400's message reaches the client; a 401's and a stream's error reach the log.
    const faults = [
      [false, { kind: 'status', status: 400, message: `token ${key.slice(0, 14)}... is not valid for this project` }],
      [false, { kind: 'status', status: 401, message: `unauthorized: credential ${key.slice(0, 10)}` }],
      [true, { kind: 'error_after_200', afterChunks: 1, message: `credential ${key.slice(0, 12)}**** expired` }],
    ] as const;
    for (const [stream, fault] of faults) {
      for (const base of ['v1', 'alt/v1']) {
        logSim.providers.scaleway?.setFault({ ...fault, times: 1 });
        const text = await (await chat(base, stream)).text();
        expect(text).not.toContain(key.slice(0, 9));
        if ('status' in fault && fault.status === 400) expect(text).toContain('token [redacted]... is not valid');
      }
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(proc.output()).toContain('credential [redacted]');
    expect(proc.output()).not.toContain(key.slice(0, 9));
  }, 30_000);
});
