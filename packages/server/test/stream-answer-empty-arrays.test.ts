import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * Some OpenAI-compatible hosts open a stream with the role and empty lists (`tool_calls: []`, `annotations: []`)
 * beside the empty content, then think before their first token. Such a chunk says nothing yet: a host that then
 * stalls past its timeoutMs has not begun its answer, and the next offer answers the whole stream.
 */
const TIMEOUT_MS = 600;
const PRICE = { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' };
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usage = `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`;

/** Streams of the stalling host, held open until the gateway lets them go. */
const stalled: ServerResponse[] = [];

function serve(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['lists', 'logprobs', 'ok']);
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const upstreamModel = (JSON.parse(body) as { model: string }).model;
  if (upstreamModel === 'lists' || upstreamModel === 'logprobs') {
    res.write(
      upstreamModel === 'lists'
        ? chunk({ role: 'assistant', content: '', tool_calls: [], annotations: [] })
        : `data: ${JSON.stringify({ id: 's1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { role: 'assistant', content: '', refusal: null }, logprobs: { content: [], refusal: null }, finish_reason: null }] })}\n\n`,
    );
    stalled.push(res);
    return;
  }
  res.end(`${chunk({ role: 'assistant', content: '' })}${chunk({ content: 'good answer' })}${chunk({}, 'stop')}${usage}data: [DONE]\n\n`);
}

const model = (id: string, first: string): ModelConfig => ({
  id,
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming'],
  offers: [
    { provider: 'lister', upstreamModel: first, pricing: PRICE },
    { provider: 'steady', upstreamModel: 'ok', pricing: PRICE },
  ],
});

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'lister', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '', timeoutMs: TIMEOUT_MS },
        { id: 'steady', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '', timeoutMs: TIMEOUT_MS },
      ],
      models: [model('pair/lists-first', 'lists'), model('pair/logprobs-first', 'logprobs')],
    }),
  });
});
afterAll(async () => {
  for (const res of stalled) res.destroy();
  await gw?.close();
  upstream?.close();
});

describe('a stream that opens with empty lists beside its role, then stalls', () => {
  it.each([
    ['tool_calls: [] and annotations: [] in its delta', 'pair/lists-first'],
    ['logprobs: {content: [], refusal: null} on its choice', 'pair/logprobs-first'],
  ])('with %s, has not begun its answer: the next offer answers the whole stream, with no error event', async (_, id) => {
    const { key } = await gw.createKey();
    for (const base of [gw.baseA, gw.baseB]) {
      const res = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: id, stream: true, messages: [{ role: 'user', content: 'think first' }] }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-gateway-provider')).toBe('steady');
      const text = await res.text();
      expect(text).not.toContain('"error"');
      expect(text).not.toContain('tool_calls');
      expect(text).not.toContain('"content":[]');
      expect(text).toContain('"content":"good answer"');
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    }
  });
});
