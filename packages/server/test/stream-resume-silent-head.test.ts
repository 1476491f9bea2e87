import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * A reasoning model that sends its first reasoning delta and then thinks in silence until the test lets it go on:
 * a resume (Last-Event-ID) made during the silence has no event to send. Its status and headers must come at once,
 * not with the first heartbeat (set to its longest, 15 s, here) or the next event, which a client with a short read
 * timeout (httpx's 5 s) or a proxy takes for a gateway that does not answer.
 */
const PRICE = { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' };
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 't1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const rest =
  chunk({ content: 'Hello' }) +
  chunk({}, 'stop') +
  `data: ${JSON.stringify({ id: 't1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 } })}\n\ndata: [DONE]\n\n`;

/** The upstream answers waiting for the test to end their silence. */
const thinking: ServerResponse[] = [];
function goOn(): void {
  for (const res of thinking.splice(0)) res.end(rest);
}

function serve(req: IncomingMessage, res: ServerResponse) {
  if (req.method === 'GET') return answerModelList(res, ['thinker']);
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(chunk({ role: 'assistant', content: '', reasoning_content: 'Let me think.' }));
  thinking.push(res);
}

const model: ModelConfig = {
  id: 'deep/thinker',
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming'],
  offers: [{ provider: 'thinkers', upstreamModel: 'thinker', pricing: PRICE }],
};

let upstream: Server;
let redis: RedisServer;
let pg: PostgresServer;
let gws: TestGateway[] = [];

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  [redis, pg] = await Promise.all([startRedis(), startPostgres()]);
  const databaseUrl = await pg.createDatabase();
  for (let i = 0; i < 2; i++) {
    gws.push(
      await startGateway({
        redisUrl: redis.url,
        databaseUrl,
        env: { GW_STREAM_HEARTBEAT_MS: '15000' },
        catalogue: () => ({
          providers: [{ id: 'thinkers', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '', timeoutMs: 60_000 }],
          models: [model],
        }),
      }),
    );
  }
}, 60_000);
afterAll(async () => {
  goOn();
  await Promise.all(gws.map((g) => g.close()));
  gws = [];
  upstream?.close();
  await redis?.stop();
  await pg?.stop();
});

function gw(i: number): TestGateway {
  const g = gws[i];
  if (!g) throw new Error(`gateway ${i} not started`);
  return g;
}

const body = JSON.stringify({ model: 'deep/thinker', stream: true, messages: [{ role: 'user', content: 'think' }] });

/** The first event's id, read from a stream the upstream keeps silent after it. */
async function firstEventId(base: string, key: string): Promise<{ id: string; res: Response }> {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
  });
  expect(res.status).toBe(200);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  let text = '';
  while (!/^id: (\S+)$/m.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`stream ended before its first event: ${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { id: (/^id: (\S+)$/m.exec(text) as RegExpExecArray)[1] as string, res };
}

/** The status of the resume, or 'no head' if none came within 3 s while the upstream is still silent. */
async function resumeHead(
  base: string,
  key: string,
  lastEventId: string,
  extra: Record<string, string> = {},
): Promise<{ status: number | 'no head'; text: () => Promise<string> }> {
  const pending = fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'last-event-id': lastEventId, ...extra },
    body,
  });
  const first = await Promise.race([pending, new Promise<'no head'>((r) => setTimeout(() => r('no head'), 3000))]);
  return { status: first === 'no head' ? first : first.status, text: async () => (await pending).text() };
}

describe('a resume of a stream whose model is thinking in silence', () => {
  for (const [name, at, extra] of [
    ['on the instance relaying it', 0, {}],
    ['on the instance relaying it, with X-Idempotency-Key', 0, { 'x-idempotency-key': 'resume-keyed' }],
    ['on another instance, read from Redis', 1, {}],
  ] as const) {
    it(`answers its status and headers at once, ${name}, and then the rest of the stream`, async () => {
      const { key } = await gw(0).createKey();
      const { id, res } = await firstEventId(gw(0).baseA, key);
      // Redis holds the stream's first event as soon as it is written: another instance finds it.
      const resumed = await resumeHead(gw(at).baseA, key, id, extra);
      expect(resumed.status).toBe(200);
      goOn();
      const text = await resumed.text();
      expect(text).toContain('"content":"Hello"');
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(text).not.toContain('Let me think.');
      await res.body?.cancel();
    }, 20_000);
  }
});
