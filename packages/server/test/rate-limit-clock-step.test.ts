import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN } from './helpers/gateway.js';
import { chatOnce, type GatewayProcess, spawnGateway } from './helpers/process.js';
import { stepWallClock as stepClock, steppableClockEnv } from './helpers/step-clock.js';

let sim: Simulator;
let proc: GatewayProcess;
let dir: string;

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  dir = mkdtempSync(join(tmpdir(), 'gw-clock-step-'));
  writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
  proc = await spawnGateway({
    GW_CONFIG: join(dir, 'gw.json'),
    GW_DATA_DIR: join(dir, 'data'),
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    GW_CIRCUIT_OPEN_MS: '1000',
    ...steppableClockEnv(dir),
  });
}, 60_000);
afterAll(async () => {
  proc?.child.kill('SIGKILL');
  await sim?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function createKey(rateLimitRpm: number): Promise<string> {
  const res = await fetch(`${proc.url}/admin/v1/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ rateLimitRpm }),
  });
  return ((await res.json()) as { key: string }).key;
}

/** Steps the gateway's wall clock by `ms` and waits until it has. */
function stepWallClock(ms: number): Promise<void> {
  return stepClock(proc, dir, ms);
}

/** Fills a key's window of `limit` requests and returns its first refusal. */
async function fill(key: string, limit: number): Promise<Response> {
  for (let i = 0; i < limit; i++) expect((await chatOnce(proc.url, key)).status).toBe(200);
  const refused = await chatOnce(proc.url, key);
  expect(refused.status).toBe(429);
  return refused;
}

describe('the rate limit of a single instance when the wall clock is stepped', () => {
  it('a step forward of more than a minute does not empty the window: no second burst', async () => {
    const key = await createKey(3);
    const before = Number((await fill(key, 3)).headers.get('retry-after'));
    await stepWallClock(61_000);
    const after = await chatOnce(proc.url, key);
    expect(after.status).toBe(429);
    // Still the same wait, to the second.
    expect(Number(after.headers.get('retry-after'))).toBeLessThanOrEqual(before);
    expect(Number(after.headers.get('retry-after'))).toBeGreaterThanOrEqual(before - 1);
    expect(after.headers.get('x-ratelimit-reset')).toBe(after.headers.get('retry-after'));
    await stepWallClock(-61_000);
  });

  it('a step back of two minutes does not hold the window full for three: Retry-After stays within the minute', async () => {
    const key = await createKey(2);
    const before = Number((await fill(key, 2)).headers.get('retry-after'));
    expect(before).toBeLessThanOrEqual(60);
    await stepWallClock(-120_000);
    const after = await chatOnce(proc.url, key);
    expect(after.status).toBe(429);
    expect(Number(after.headers.get('retry-after'))).toBeLessThanOrEqual(before);
    expect(Number(after.headers.get('retry-after'))).toBeGreaterThanOrEqual(before - 1);
    await stepWallClock(120_000);
  });
});

/** Variant B's embeddings of `texts` texts of 20,000 characters (5,000 tokens each, as the beta counts and the provider bills). */
function embedB(key: string, texts: number): Promise<Response> {
  return fetch(`${proc.url}/alt/v1/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mistral/embed', input: Array.from({ length: texts }, () => 'x'.repeat(20_000)) }),
  });
}

describe('the embeddings beta of a single instance when the wall clock is stepped', () => {
  it('a step forward of more than a minute does not empty the beta window, nor does a step back hold it full longer', async () => {
    const key = await createKey(1000);
    // The whole minute's 200,000 tokens in one request; the next is refused until it ages out.
    expect((await embedB(key, 40)).status).toBe(200);
    const refused = await embedB(key, 1);
    expect(refused.status).toBe(429);
    const before = Number(refused.headers.get('retry-after'));
    await stepWallClock(61_000);
    const ahead = await embedB(key, 1);
    expect(ahead.status).toBe(429);
    expect(Number(ahead.headers.get('retry-after'))).toBeLessThanOrEqual(before);
    await stepWallClock(-181_000);
    const behind = await embedB(key, 1);
    expect(behind.status).toBe(429);
    expect(Number(behind.headers.get('retry-after'))).toBeLessThanOrEqual(before);
    await stepWallClock(120_000);
  });
});

describe('an offer’s circuit when the wall clock is stepped', () => {
  it('a step back of two minutes keeps an open circuit out for its 1 s, not two minutes more', async () => {
    const key = await createKey(1000);
    const medium = () =>
      fetch(`${proc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/medium', messages: [{ role: 'user', content: 'hi' }] }),
      });
    // mistral/medium has one offer: its failures open its circuit, and the model answers 503 while it is open.
    sim.providers.mistral?.setFault({ kind: 'status', status: 500, endpoints: ['chat'] });
    let status = 0;
    for (let i = 0; i < 10 && status !== 503; i++) status = (await medium()).status;
    expect(status).toBe(503);
    sim.providers.mistral?.clearFaults();
    await stepWallClock(-120_000);
    await new Promise((r) => setTimeout(r, 1_300));
    expect((await medium()).status).toBe(200);
    await stepWallClock(120_000);
  }, 30_000);
});
