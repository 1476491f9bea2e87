import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';

// A provider (or a proxy in front of it) that answers an error with a message of hundreds of kilobytes: the gateway
// reads only its start, so that no pattern it runs on the message can hold the event loop, and every other request.

let gw: TestGateway;
let key: string;

beforeAll(async () => {
  gw = await startGateway();
  key = (await gw.createKey({ rateLimitRpm: 1000 })).key;
}, 60_000);
afterAll(() => gw?.close());
beforeEach(() => resetProviders(gw.sim));

/** Well above what the gateway takes for any error answer; such a message took it 5 to 10 s before it was cut. */
const PROMPT_MS = 1_500;

async function chat(pin: string, stream: boolean) {
  const started = performance.now();
  const res = await fetch(`${gw.baseA}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-gateway-provider': pin },
    body: JSON.stringify({ model: 'mistral/small', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as { error: { message: string } };
  return { status: res.status, message: body.error.message, ms: performance.now() - started };
}

describe('a provider error with a huge message', () => {
  it('an HTML page opening with 30,000 unclosed <title tags is answered at once, named as an HTML page', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 503, retryAfter: null, message: `<html>${'<title'.repeat(30_000)}` });
    const r = await chat('scaleway', false);
    expect(r.status).toBe(502);
    expect(r.message).toContain('scaleway answered 503: an HTML page');
    expect(r.ms).toBeLessThan(PROMPT_MS);
  });

  it("a 422 whose message repeats 'model ' 30,000 times is answered at once, its message cut to 300 characters", async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'status', status: 422, message: 'model '.repeat(30_000) });
    const r = await chat('scaleway', false);
    expect(r.status).toBe(400);
    expect(r.message.length).toBeLessThan(400);
    expect(r.ms).toBeLessThan(PROMPT_MS);
  });

  it('an error event of 80,000 dots before the first chunk is answered at once, with its message cut as a status answer is', async () => {
    gw.sim.providers.scaleway?.setFault({ kind: 'error_after_200', afterChunks: 0, message: `${'.'.repeat(80_000)}x` });
    const r = await chat('scaleway', true);
    expect(r.status).toBe(502);
    expect(r.message).toContain('scaleway sent an error in its stream: ...');
    expect(r.message.length).toBeLessThan(500);
    expect(r.ms).toBeLessThan(PROMPT_MS);
  });

  it("Mistral's answer of the same HTML page is answered at once, named as an HTML page", async () => {
    gw.sim.providers.mistral?.setFault({ kind: 'status', status: 503, retryAfter: null, message: `<html>${'<title'.repeat(30_000)}` });
    const r = await chat('mistral', false);
    expect(r.status).toBe(502);
    expect(r.message).toContain('mistral answered 503: an HTML page');
    expect(r.ms).toBeLessThan(PROMPT_MS);
  });
});
