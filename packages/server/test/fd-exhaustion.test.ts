import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type GatewayProcess, spawnGateway } from './helpers/process.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/** One POST of `body` to `path` on the agent's kept-alive connection: status, headers and body. */
function post(agent: Agent, url: string, path: string, key: string, body: unknown, extra: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...extra };
    const req = request(`${url}${path}`, { method: 'POST', agent, headers }, (res) => {
      let text = '';
      res.on('data', (d) => {
        text += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(typeof body === 'string' ? body : JSON.stringify(body));
  });
}

/** Served by alpha alone. */
const chat = { model: 'mistral/small', messages: [{ role: 'user', content: 'hi' }] };
/** Served by alpha, then beta. */
const shared = { ...chat, model: 'mistral/nemo' };

/** A chat completion's answer, whose connection is closed (`connection: close`) or kept. */
function answerChat(res: ServerResponse, close: boolean): void {
  res.writeHead(200, { 'content-type': 'application/json', ...(close ? { connection: 'close' } : {}) });
  res.end(
    JSON.stringify({
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
    }),
  );
}

const offer = (provider: string, model: string) =>
  `      - provider: ${provider}\n        upstreamModel: ${model}\n        pricing: { prompt_per_1m: 0.2, completion_per_1m: 0.6, currency: EUR }\n`;

describe('a gateway out of file descriptors', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-fd-'));
  let gw: GatewayProcess | undefined;
  const idle: Socket[] = [];
  afterAll(() => {
    for (const s of idle) s.destroy();
    gw?.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers 503 out_of_resources (Retry-After: 1), tries an offer whose connection is kept alive, and opens no healthy provider's circuit; served again once descriptors are free", async () => {
    let served = 0;
    let servedByBeta = 0;
    // Each answer of alpha closes its connection: every call needs a new one, and so a descriptor.
    const alpha = await startRawUpstream((req, res) => {
      if (req.url?.endsWith('/models')) return answerModelList(res, ['mistral-small', 'nemo', 'whisper']);
      served++;
      answerChat(res, true);
    });
    // Beta keeps its connections alive.
    const beta = await startRawUpstream((req, res) => {
      if (req.url?.endsWith('/models')) return answerModelList(res, ['nemo']);
      servedByBeta++;
      answerChat(res, false);
    });
    beta.server.keepAliveTimeout = 60_000;
    const servers = [alpha.server, beta.server];
    try {
      const provider = (id: string, baseUrl: string) => `  - id: ${id}\n    type: openai\n    baseUrl: ${baseUrl}\n    apiKey: k\n    region: fr-par\n`;
      const model = (id: string) => `  - id: ${id}\n    kind: chat\n    owned_by: mistral\n    offers:\n`;
      writeFileSync(
        join(dir, 'gw.yaml'),
        `providers:\n${provider('alpha', alpha.baseUrl)}${provider('beta', beta.baseUrl)}models:\n` +
          `${model('mistral/small')}${offer('alpha', 'mistral-small')}${model('mistral/nemo')}${offer('alpha', 'nemo')}${offer('beta', 'nemo')}` +
          `  - id: openai/whisper\n    kind: audio\n    owned_by: openai\n    offers:\n${offer('alpha', 'whisper')}`,
      );
      gw = await spawnGateway({ GW_CONFIG: join(dir, 'gw.yaml'), GW_DATA_DIR: join(dir, 'data'), GW_CIRCUIT_FAILURES: '2' }, 30_000, 300);
      const key = /gw_live_[A-Za-z0-9_-]+/.exec(gw.output())?.[0] ?? '';
      const { url } = gw;
      // A connection of the client's, open before the descriptors run out.
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      expect((await post(agent, url, '/v1/chat/completions', key, chat)).status).toBe(200);
      expect(served).toBe(1);
      // Beta's connection, kept alive.
      expect((await post(agent, url, '/v1/chat/completions', key, shared, { 'x-gateway-provider': 'beta' })).status).toBe(200);
      expect(servedByBeta).toBe(1);

      // Idle connections until the gateway has no descriptor left: it then closes those it can no longer take.
      const port = Number(new URL(url).port);
      let refused = 0;
      for (let round = 0; round < 40 && refused === 0; round++) {
        for (let i = 0; i < 25; i++) {
          const s = connect(port, '127.0.0.1');
          s.on('error', () => {});
          s.on('close', () => refused++);
          idle.push(s);
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(refused).toBeGreaterThan(0);

      for (const [path, type] of [
        ['/v1/chat/completions', 'service_unavailable'],
        ['/v1/chat/completions', 'service_unavailable'],
        ['/alt/v1/chat/completions', 'server_error'],
      ] as const) {
        const res = await post(agent, url, path, key, chat);
        expect(res.status, res.body).toBe(503);
        const { error } = JSON.parse(res.body) as { error: { code: string; type: string; message: string } };
        expect(error.code).toBe('service_unavailable');
        expect(error.type).toBe(type);
        expect(error.message).toContain('EMFILE');
        expect(res.headers['retry-after']).toBe('1');
      }
      expect(served).toBe(1);
      // An upload finds no descriptor for its spool file: the same 503, not an internal error.
      const form = `--b\r\ncontent-disposition: form-data; name="model"\r\n\r\nopenai/whisper\r\n--b\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\ncontent-type: audio/wav\r\n\r\nRIFF....WAVE\r\n--b--\r\n`;
      const upload = await post(agent, url, '/v1/audio/transcriptions', key, form, { 'content-type': 'multipart/form-data; boundary=b' });
      expect(upload.status, upload.body).toBe(503);
      expect(upload.body).toContain('could not keep the upload in GW_UPLOAD_DIR: it is out of file descriptors');
      expect(upload.headers['retry-after']).toBe('1');
      // Alpha cannot be reached without a new connection; beta's kept-alive one serves the request.
      const failedOver = await post(agent, url, '/v1/chat/completions', key, shared);
      expect(failedOver.status, failedOver.body).toBe(200);
      expect(failedOver.headers['x-gateway-provider']).toBe('beta');
      expect(servedByBeta).toBe(2);

      // The descriptors are back: the provider, which never failed, is asked at once (its circuit never opened).
      for (const s of idle.splice(0)) s.destroy();
      await new Promise((r) => setTimeout(r, 500));
      const again = await post(agent, url, '/v1/chat/completions', key, chat);
      expect(again.status, again.body).toBe(200);
      expect(served).toBe(2);
      agent.destroy();
      // Said once at warn, not once per request.
      expect(gw.output().match(/could not open a connection to alpha: it is out of file descriptors/g)).toHaveLength(1);
    } finally {
      for (const server of servers) {
        server.closeAllConnections();
        server.close();
      }
    }
  }, 60_000);
});
