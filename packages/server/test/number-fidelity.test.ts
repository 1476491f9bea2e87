import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ModelConfig } from '@gw/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * Numbers a client writes reach the provider as written: JSON.parse reads an integer past 2^53 as the nearest double
 * (9007199254740993 became 9007199254740992) and a number past a double's range as Infinity, which JSON writes as
 * null. The upstream here keeps the exact bytes of each body it is sent.
 */
const PRICE = { prompt_per_1m: 1, completion_per_1m: 2, currency: 'EUR' };
/** The bodies each upstream model was sent, as bytes. */
const sent: string[] = [];

function serve(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['m']);
  sent.push(body);
  const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
  const usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 };
  if (stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (choices: unknown[], extra = {}) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices, ...extra })}\n\n`;
    res.end(
      `${chunk([{ index: 0, delta: { role: 'assistant', content: 'ok' }, finish_reason: null }])}${chunk([{ index: 0, delta: {}, finish_reason: 'stop' }])}${chunk([], { usage })}data: [DONE]\n\n`,
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      id: 'c1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
      usage,
    }),
  );
}

const model = (id: string, provider: string): ModelConfig => ({
  id,
  kind: 'chat',
  owned_by: 'test',
  context_window: 8000,
  capabilities: ['streaming', 'tools'],
  offers: [{ provider, upstreamModel: 'm', pricing: PRICE }],
});

let upstream: Server;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [
        { id: 'vhost', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' },
        { id: 'mhost', type: 'mistral', baseUrl: started.baseUrl, region: 'fr-par', apiKey: 'k' },
      ],
      models: [model('test/vllm', 'vhost'), model('test/mistral', 'mhost')],
    }),
  });
  key = (await gw.createKey({ rateLimitRpm: 10_000 })).key;
});
afterAll(async () => {
  await gw?.close();
  upstream?.close();
});

const VARIANTS = [
  ['A', () => gw.baseA, 'validation_error'],
  ['B', () => gw.baseB, 'invalid_request'],
] as const;

/** A chat body as text, with `extra` (JSON text, so its numbers are as written) after the messages. */
const body = (model: string, extra: string) => `{"model":"${model}","messages":[{"role":"user","content":"hi"}],"max_tokens":5${extra}}`;

async function post(base: string, text: string) {
  const res = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: text,
  });
  // A stream's events are read whole; only a JSON answer is parsed.
  const json = res.headers.get('content-type')?.startsWith('application/json') === true;
  const answer = json ? await res.json() : { events: await res.text() };
  return { status: res.status, body: answer as { error?: { code: string; param: string | null; message: string } } };
}

/** What the upstream was sent for one request answered 200. */
async function sentFor(base: string, text: string): Promise<string> {
  const before = sent.length;
  const res = await post(base, text);
  expect([res.status, res.body.error]).toEqual([200, undefined]);
  expect(sent.length).toBe(before + 1);
  return sent[sent.length - 1] as string;
}

const TOOL = (schema: string) => `,"tools":[{"type":"function","function":{"name":"pick","parameters":{"type":"object","properties":{"id":${schema}}}}}]`;

describe('an integer past 2^53', () => {
  for (const [variant, base] of VARIANTS) {
    it(`${variant}: reaches a vLLM host as written, in a tool's schema, a response format's schema, an extra field and seed`, async () => {
      const extra =
        TOOL(
          '{"type":"integer","minimum":-9223372036854775808,"maximum":18446744073709551615,"enum":[9007199254740993,12345678901234567891],"const":9007199254740993}',
        ) +
        ',"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","properties":{"n":{"type":"integer","maximum":9007199254740993}}}}}' +
        ',"chat_template_kwargs":{"budget":9007199254740995},"top_k":12345678901234567891,"seed":9007199254740993';
      for (const stream of ['', ',"stream":true']) {
        const got = await sentFor(base(), body('test/vllm', extra + stream));
        expect(got).toContain(
          '"minimum":-9223372036854775808,"maximum":18446744073709551615,"enum":[9007199254740993,12345678901234567891],"const":9007199254740993',
        );
        expect(got).toContain('"properties":{"n":{"type":"integer","maximum":9007199254740993}}');
        expect(got).toContain('"chat_template_kwargs":{"budget":9007199254740995}');
        expect(got).toContain('"top_k":12345678901234567891');
        expect(got).toContain('"seed":9007199254740993');
      }
    });

    it(`${variant}: seed is sent as written beside a message's own field of that name, and written with an escape`, async () => {
      // The message's 9007199254740992 and the seed's 9007199254740993 read as one double.
      const message = '{"role":"user","content":"hi","seed":9007199254740992}';
      for (const key of ['seed', 's\\u0065ed']) {
        const got = await sentFor(base(), `{"model":"test/vllm","messages":[${message}],"max_tokens":5,"${key}":9007199254740993}`);
        expect([key, got]).toEqual([key, expect.stringContaining('"max_tokens":5,"seed":9007199254740993')]);
      }
    });

    it(`${variant}: seed reaches Mistral as random_seed, as written, and a function's schema of the functions API as a tool's`, async () => {
      expect(await sentFor(base(), body('test/mistral', ',"seed":9007199254740993'))).toContain('"random_seed":9007199254740993');
      const functions = ',"functions":[{"name":"pick","parameters":{"type":"object","properties":{"id":{"type":"integer","maximum":9007199254740993}}}}]';
      expect(await sentFor(base(), body('test/mistral', functions))).toContain('"properties":{"id":{"type":"integer","maximum":9007199254740993}}');
    });

    it(`${variant}: int64's ends as seed are sent as written, and one past them is refused naming seed`, async () => {
      expect(await sentFor(base(), body('test/vllm', ',"seed":9223372036854775807'))).toContain('"seed":9223372036854775807');
      expect(await sentFor(base(), body('test/vllm', ',"seed":-9223372036854775808'))).toContain('"seed":-9223372036854775808');
      const before = sent.length;
      for (const seed of ['9223372036854775808', '-9223372036854775809', '9223372036854776000']) {
        const res = await post(base(), body('test/vllm', `,"seed":${seed}`));
        expect([seed, res.status, res.body.error?.param]).toEqual([seed, 400, 'seed']);
        expect(res.body.error?.message).toBe("Invalid body: 'seed' must be a 64-bit integer, from -9223372036854775808 to 9223372036854775807.");
      }
      expect(sent.length).toBe(before);
    });

    it(`${variant}: in a field the schema bounds, is refused by its bound`, async () => {
      const res = await post(base(), body('test/vllm', ',"logit_bias":{"123":9007199254740993}'));
      expect([res.status, res.body.error?.param, res.body.error?.message]).toEqual([400, 'logit_bias.123', "Invalid body: 'logit_bias.123' must be <= 100."]);
    });
  }
});

describe('a number past the range of a double', () => {
  for (const [variant, base, code] of VARIANTS) {
    it(`${variant}: is refused naming its field, where it reached the provider as null`, async () => {
      const before = sent.length;
      for (const [extra, param] of [
        [',"top_k":1e400', 'top_k'],
        [',"repetition_penalty":-1E+999', 'repetition_penalty'],
        [',"temperature":1e400', 'temperature'],
        [TOOL('{"type":"number","maximum":1e400}'), 'tools.0.function.parameters.properties.id.maximum'],
        [',"chat_template_kwargs":{"limits":[1,2e308]}', 'chat_template_kwargs.limits.1'],
      ] as const) {
        const res = await post(base(), body('test/vllm', extra));
        expect([extra, res.status, res.body.error?.code, res.body.error?.param]).toEqual([extra, 400, code, param]);
        expect(res.body.error?.message).toBe(`Invalid body: '${param}' is a number beyond the range of a double (±1.8e308), which cannot be read as written.`);
      }
      expect(sent.length).toBe(before);
    });
  }
});

describe('ordinary numbers', () => {
  it('are sent as before: a fraction written with 17 digits, an exponent, a tiny number', async () => {
    const got = await sentFor(gw.baseA, body('test/vllm', ',"temperature":0.30000000000000004,"top_k":1e2,"min_p":1e-300'));
    expect(got).toContain('"temperature":0.30000000000000004');
    expect(got).toContain('"top_k":100');
    expect(got).toContain('"min_p":1e-300');
  });
});
