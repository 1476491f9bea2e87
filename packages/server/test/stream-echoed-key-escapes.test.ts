import type { Server } from 'node:http';
import type { GatewayFileConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

// A provider (or a debugging proxy at its baseUrl) that echoes the Authorization it got into a stream's content has
// the key taken out of what the client reads, however its JSON escapes the key's characters: PHP's json_encode writes
// every `/` as `\/`, and a key made by `openssl rand -base64` holds some. The client's JSON parser reads the key.

const KEY = 'Qm9vb/dXBzdHJlYW0+c2VjcmV0/MTIzNDU2Nzg=';

/** A stream chunk as PHP's json_encode writes it: every `/` escaped. */
function phpChunk(delta: Record<string, unknown>, finish: string | null): string {
  const json = JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] });
  return `data: ${json.replaceAll('/', '\\/')}\n\n`;
}

let upstream: Server;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  const started = await startRawUpstream((req, res) => {
    if (req.method === 'GET') return answerModelList(res, ['m']);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`${phpChunk({ role: 'assistant', content: `you sent ${req.headers.authorization}` }, null)}${phpChunk({}, 'stop')}data: [DONE]\n\n`);
  });
  upstream = started.server;
  const catalogue = (c: GatewayFileConfig): GatewayFileConfig => ({
    providers: [...c.providers, { id: 'echo', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: KEY }],
    models: [
      ...c.models,
      {
        id: 'edge/echo',
        kind: 'chat',
        owned_by: 'test',
        capabilities: ['streaming'],
        offers: [{ provider: 'echo', upstreamModel: 'm', pricing: { prompt_per_1m: 1, completion_per_1m: 1, currency: 'EUR' } }],
      },
    ],
  });
  gw = await startGateway({ catalogue });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  upstream?.close();
});

describe("a provider key echoed into a stream with PHP's escapes", () => {
  it('is redacted in what the client parses', async () => {
    const res = await fetch(`${gw.baseA}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'edge/echo', stream: true, messages: [{ role: 'user', content: 'Bonjour' }] }),
    });
    expect(res.status).toBe(200);
    const content = (await res.text())
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => (JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
      .join('');
    expect(content).toBe('you sent Bearer [redacted]');
  });
});
