import type { Server } from 'node:http';
import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import type OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionMessageToolCall, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetProviders, startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';
import { openAiClients } from './helpers/sdk.js';

/**
 * Parallel tool calls, from every chat provider, as the official SDK reads them: two calls with their own ids, names
 * and arguments, streamed or not, and a next turn carrying both results. The simulated hosts make one call per tool
 * the user's message names; Mistral streams each call whole in its own chunk without `index` (or, with
 * `toolCallFragments`, in fragments whose continuations carry the id "null"), vLLM hosts, Azure and Cohere's
 * compatibility API in fragments keyed by `index`.
 */

let sim: Simulator;
let gw: TestGateway;
let client: OpenAI;

const COMMAND = 'test/command-a';

beforeAll(async () => {
  sim = await startSimulator({ latencyScale: 0 });
  const cohere = sim.providers.cohere;
  if (!cohere) throw new Error('no cohere');
  const catalogue = (c: GatewayFileConfig): GatewayFileConfig => ({
    providers: [
      ...c.providers,
      { id: 'cohere-compat', type: 'openai', vendor: 'cohere', baseUrl: `${cohere.url}/compatibility/v1`, apiKey: cohere.apiKey, region: 'eu' },
    ],
    models: [
      ...c.models,
      {
        id: COMMAND,
        kind: 'chat',
        owned_by: 'cohere',
        context_window: 256_000,
        capabilities: ['streaming', 'tools'],
        offers: [{ provider: 'cohere-compat', upstreamModel: 'command-a-03-2025', pricing: { prompt_per_1m: 2.5, completion_per_1m: 10, currency: 'EUR' } }],
      },
    ],
  });
  gw = await startGateway({ sim, catalogue });
  client = openAiClients(gw, (await gw.createKey({ rateLimitRpm: 10_000 })).key).a;
}, 60_000);
afterAll(async () => {
  await gw?.close();
  await sim?.close();
});

const cityTool = (name: string): ChatCompletionTool => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
});
const tools = [cityTool('get_weather'), cityTool('get_time')];

/** Provider, the model pinned to it, and whether Mistral streams its calls in fragments. */
const HOSTS: [string, string, boolean][] = [
  ['scaleway', 'mistral/small', false],
  ['ovh', 'mistral/small', false],
  ['nebius', 'meta/llama-3.3-70b', false],
  ['mistral', 'mistral/small', false],
  ['mistral', 'mistral/small', true],
  ['azure', 'openai/gpt-4o-mini', false],
  ['cohere-compat', COMMAND, false],
];

const ASKS: [string, [string, string][]][] = [
  [
    'Call get_weather for Paris and get_time for Berlin.',
    [
      ['get_weather', 'Paris'],
      ['get_time', 'Berlin'],
    ],
  ],
  // The same tool twice: only the index tells the calls apart.
  [
    'Use get_weather for Paris, then get_weather for Rome.',
    [
      ['get_weather', 'Paris'],
      ['get_weather', 'Rome'],
    ],
  ],
];

type Mode = 'create' | 'stream' | 'helper';

/** The assistant message the SDK makes of the answer, each way a client asks for it. */
async function ask(mode: Mode, model: string, provider: string, messages: ChatCompletionMessageParam[]) {
  const opts = { headers: { 'X-Gateway-Provider': provider } };
  const body = { model, messages, tools, max_tokens: 200 };
  if (mode === 'create') {
    const done = await client.chat.completions.create(body, opts);
    return { message: done.choices[0]?.message, finish: done.choices[0]?.finish_reason };
  }
  if (mode === 'helper') {
    const done = await client.chat.completions.stream(body, opts).finalChatCompletion();
    return { message: done.choices[0]?.message, finish: done.choices[0]?.finish_reason };
  }
  // What a client keying fragments by `index` (as OpenAI documents them) puts together.
  const calls: ChatCompletionMessageToolCall[] = [];
  let finish: string | null = null;
  let content = '';
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true }, opts)) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    finish = choice.finish_reason ?? finish;
    for (const frag of choice.delta.tool_calls ?? []) {
      expect(typeof frag.index).toBe('number');
      calls[frag.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      const call = calls[frag.index] as ChatCompletionMessageToolCall & { type: 'function' };
      if (frag.id) call.id = frag.id;
      if (frag.function?.name) call.function.name = frag.function.name;
      call.function.arguments += frag.function?.arguments ?? '';
    }
  }
  return { message: { role: 'assistant' as const, content: content || null, tool_calls: calls.length > 0 ? calls : undefined }, finish };
}

describe('parallel tool calls reach the SDK as separate calls', () => {
  for (const [provider, model, fragments] of HOSTS) {
    const name = `${provider}${fragments ? ' (fragments)' : ''}`;
    for (const mode of ['create', 'stream', 'helper'] as const) {
      it(`${name}, ${mode}: each call keeps its id, name and arguments, and both results go back`, async () => {
        resetProviders(sim);
        sim.providers.mistral?.configure({ toolCallFragments: fragments });
        for (const [text, expected] of ASKS) {
          const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: text }];
          const { message, finish } = await ask(mode, model, provider, messages);
          const calls = (message?.tool_calls ?? []) as ChatCompletionMessageToolCall[];
          const got = calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)]);
          expect([text, finish, got]).toEqual([text, 'tool_calls', expected.map(([fn, city]) => ['function', fn, { city }])]);
          const ids = calls.map((c) => c.id);
          expect(new Set(ids).size, `${ids}`).toBe(2);
          expect(ids.every((id) => typeof id === 'string' && id.length > 0 && id !== 'null')).toBe(true);

          // The next turn: the calls and a result for each.
          messages.push({ role: 'assistant', content: message?.content ?? null, tool_calls: calls });
          calls.forEach((c, i) => {
            messages.push({ role: 'tool', tool_call_id: c.id, content: `result ${i + 1} for ${c.function.name}` });
          });
          const next = await ask(mode, model, provider, messages);
          expect([next.finish, next.message?.tool_calls ?? []]).toEqual(['stop', []]);
          expect(next.message?.content).toContain('result 2');
        }
      });
    }
  }

  it('one call only with parallel_tool_calls false', async () => {
    resetProviders(sim);
    for (const [provider, model] of [
      ['nebius', 'meta/llama-3.3-70b'],
      ['mistral', 'mistral/small'],
    ] as const) {
      const stream = client.chat.completions.stream(
        { model, messages: [{ role: 'user', content: ASKS[0]?.[0] ?? '' }], tools, parallel_tool_calls: false, max_tokens: 200 },
        { headers: { 'X-Gateway-Provider': provider } },
      );
      const done = await stream.finalChatCompletion();
      expect([provider, done.choices[0]?.message.tool_calls?.map((c) => c.function.name)]).toEqual([provider, ['get_weather']]);
    }
  });
});

/**
 * An OpenAI-compatible host that streams its calls as Mistral's API does (a vLLM host behind Mistral's tool parser, a
 * proxy in front of Mistral): `whole`, each call whole in its own chunk without `index`; `zero`, the same with
 * `index: 0` on each (what Mistral's SDK reads); `fragments`, a first fragment per call, then continuations with the
 * id "null" and an empty name that only their wire index tells apart.
 */
describe('an OpenAI-compatible host that does not key its calls by index', () => {
  const ARGS = ['{"city": "Paris"}', '{"city": "Rome"}'];
  const IDS = ['Ab3dE5gH1', 'Zy9xW8vU7'];
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
    id: 'cmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  function calls(style: string): unknown[] {
    if (style !== 'fragments') {
      return IDS.map((id, i) => ({
        tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: ARGS[i] }, ...(style === 'zero' ? { index: 0 } : {}) }],
      }));
    }
    return IDS.flatMap((id, index) => [
      { tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '' }, index }] },
      ...[0, 8, 16].map((at) => ({ tool_calls: [{ id: 'null', function: { name: '', arguments: ARGS[index]?.slice(at, at + 8) ?? '' }, index }] })),
    ]);
  }
  let host: Server;
  let other: TestGateway;
  let sdk: OpenAI;
  beforeAll(async () => {
    const started = await startRawUpstream((req, res, body) => {
      if (req.method === 'GET') return answerModelList(res, ['whole', 'zero', 'fragments']);
      const style = (JSON.parse(body) as { model: string }).model;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const events = [chunk({ role: 'assistant', content: '' }), ...calls(style).map((d) => chunk(d as Record<string, unknown>)), chunk({}, 'tool_calls')];
      res.end(`${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`);
    });
    host = started.server;
    const model = (id: string) => ({
      id: `host/${id}`,
      kind: 'chat' as const,
      owned_by: 'test',
      context_window: 8000,
      capabilities: ['streaming' as const, 'tools' as const],
      offers: [{ provider: 'host', upstreamModel: id, pricing: { prompt_per_1m: 1, completion_per_1m: 1, currency: 'EUR' as const } }],
    });
    other = await startGateway({
      sim,
      catalogue: () => ({
        providers: [{ id: 'host', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' }],
        models: [model('whole'), model('zero'), model('fragments')],
      }),
    });
    sdk = openAiClients(other, (await other.createKey({ rateLimitRpm: 10_000 })).key).a;
  }, 60_000);
  afterAll(async () => {
    await other?.close();
    host?.close();
  });

  for (const style of ['whole', 'zero', 'fragments']) {
    it(`${style}: the SDK's stream helper gets two calls with their own ids and arguments`, async () => {
      const done = await sdk.chat.completions
        .stream({ model: `host/${style}`, messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }], tools, max_tokens: 50 })
        .finalChatCompletion();
      const got = (done.choices[0]?.message.tool_calls ?? []) as ChatCompletionMessageToolCall[];
      expect(got.map((c) => [c.id, c.type, c.function.name, c.function.arguments])).toEqual(IDS.map((id, i) => [id, 'function', 'get_weather', ARGS[i]]));
    });
  }
});
