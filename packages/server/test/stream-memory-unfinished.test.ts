import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StreamMemory } from '../src/streaming/stream-memory.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * An OpenAI-compatible host whose streams send a first chunk, then 2 MiB of one event without ending it (no
 * newline), and wait; `release()` ends each event and the stream. The instance keeps 4 MiB of stream events
 * (GW_STREAM_MEMORY_MB): six such streams hold 12 MiB in their unfinished lines, which the bound must count.
 */
const KIB = 1024;
const MIB = 1024 * KIB;
const STREAMS = 6;
const LINE = 2 * MIB;
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };

const frame = (delta: object | null, extra: object = {}) =>
  `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: delta ? [{ index: 0, delta, finish_reason: null }] : [], ...extra })}\n\n`;

const held: Array<() => void> = [];
let cut = 0;

function answer(req: IncomingMessage, res: ServerResponse) {
  if (req.method === 'GET') return answerModelList(res, ['long-line']);
  res.on('close', () => {
    if (!res.writableEnded) cut++;
  });
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(frame({ role: 'assistant', content: 'start ' }));
  res.write('data: {"id":"s1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"');
  writeLine(res, LINE / (64 * KIB), () =>
    held.push(() => {
      if (res.destroyed) return;
      res.end(
        `"},"finish_reason":null}]}\n\n${frame({}, {})}${frame(null, { usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 } })}data: [DONE]\n\n`,
      );
    }),
  );
}

/** Writes `pieces` of 64 KiB of one line, as the gateway takes them. */
function writeLine(res: ServerResponse, pieces: number, then: () => void): void {
  const piece = 'y'.repeat(64 * KIB);
  const more = () => {
    while (pieces > 0 && !res.destroyed) {
      pieces--;
      if (!res.write(piece)) return void res.once('drain', more);
    }
    if (!res.destroyed) then();
  };
  more();
}

const model: ModelConfig = {
  id: 'long/line',
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming'],
  offers: [{ provider: 'host', upstreamModel: 'long-line', pricing: PRICE }],
};

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(answer);
  upstream = started.server;
  const baseUrl = started.baseUrl;
  gw = await startGateway({
    env: { GW_STREAM_MEMORY_MB: '4' },
    catalogue: () => ({ providers: [{ id: 'host', type: 'openai', baseUrl, region: 'fr-par', apiKey: '', timeoutMs: 20_000 }], models: [model] }),
  });
});
afterAll(async () => {
  for (const f of held.splice(0)) f();
  await gw?.close();
  await gw?.sim.close();
  upstream?.close();
});

describe('streams whose upstream holds a large unfinished event', () => {
  it('count it against GW_STREAM_MEMORY_MB: past the bound, the streams are ended with stream_buffer_exceeded until it holds', async () => {
    const memory = (gw.gateway.services.sessions as unknown as { memory: StreamMemory }).memory;
    const { key } = await gw.createKey();
    const ended: Array<{ id: string; text: string }> = [];
    const streams = Array.from({ length: STREAMS }, async () => {
      const res = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'long/line', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      });
      expect(res.status).toBe(200);
      const out = { id: res.headers.get('x-request-id') as string, text: await res.text() };
      ended.push(out);
      return out;
    });
    // Each client keeps up with what was relayed: only the unfinished lines fill the instance's memory.
    await eventually(() => expect(ended.length).toBe(STREAMS - 1), 10_000);
    expect(memory.reclaimed.streams).toBe(STREAMS - 1);
    expect(memory.bytes).toBeLessThanOrEqual(4 * MIB);
    for (const { text } of ended) {
      expect(text).toContain('"content":"start "');
      expect(text).not.toContain('[DONE]');
      expect(text.slice(text.lastIndexOf('data: '))).toMatch(
        /^data: \{"error":\{"message":"The gateway ended this stream: its instance keeps at most 4 MiB of stream events \(GW_STREAM_MEMORY_MB\).*"code":"stream_buffer_exceeded"/,
      );
    }
    // Their upstream requests were stopped.
    await eventually(() => expect(cut).toBe(STREAMS - 1));
    // The one left, within the bound, gets its long event whole once the host ends it.
    for (const f of held.splice(0)) f();
    const all = await Promise.all(streams);
    const survivor = all.find((s) => s.text.includes('[DONE]'));
    expect(survivor?.text).toContain(`"content":"${'y'.repeat(LINE)}"`);
    // One usage record each; the ended ones as streams cut short, billed for what was relayed.
    await gw.gateway.services.usage.flush();
    const records = await Promise.all(all.map((s) => gw.gateway.services.store.usage.list({ requestId: s.id })));
    expect(records.map((r) => r.length)).toEqual(all.map(() => 1));
    expect(all.map((s, i) => [s === survivor, records[i]?.[0]?.errorCode])).toEqual(
      all.map((s) => (s === survivor ? [true, null] : [false, 'stream_buffer_exceeded'])),
    );
  }, 30_000);
});
