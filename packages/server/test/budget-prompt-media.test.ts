import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DOCUMENT_PAGE_TOKENS, MEDIA_PART_TOKENS } from '../src/http/prompt-media.js';
import { estimatePromptTokens } from '../src/http/routes/chat-completions.js';
import { wav, withChunkBeforeFmt } from './helpers/audio.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { answerModelList, startRawUpstream } from './helpers/raw-upstream.js';

/**
 * Budget holds for media in a chat prompt, against a host that counts a prompt's audio as Gemini does (32 tokens
 * a second of the 16 kHz 16-bit mono PCM the tests send, 32,000 bytes a second) and its text at a token per 4
 * characters.
 */
const PRICE = { prompt_per_1m: 1000, completion_per_1m: 2000, currency: 'EUR' };
const MAX_TOKENS = 20;
const COMPLETION_TOKENS = 5;

/** The WAV files (OpenAI's `{ data }` as raw base64, Mistral's string as a data URL) of a request's audio parts. */
function audioOf(body: string): Buffer[] {
  const messages = (JSON.parse(body) as { messages: { content: unknown }[] }).messages;
  const files: Buffer[] = [];
  for (const m of messages) {
    if (!Array.isArray(m.content)) continue;
    for (const part of m.content as { type: string; input_audio?: string | { data: string } }[]) {
      if (part.type !== 'input_audio' || part.input_audio === undefined) continue;
      const data = typeof part.input_audio === 'string' ? part.input_audio : part.input_audio.data;
      if (data.startsWith('https://')) continue;
      files.push(Buffer.from(data.startsWith('data:') ? data.slice(data.indexOf(',') + 1) : data, 'base64'));
    }
  }
  return files;
}

/** The audio tokens of a WAV of 16 kHz 16-bit mono PCM: its `data` chunk's seconds at 32 tokens each. */
function audioTokens(file: Buffer): number {
  const at = file.indexOf('data', 12, 'ascii');
  return Math.ceil(file.readUInt32LE(at + 4) / 32_000) * 32;
}

function serve(req: IncomingMessage, res: ServerResponse, body: string) {
  if (req.method === 'GET') return answerModelList(res, ['omni']);
  const prompt = 10 + audioOf(body).reduce((sum, f) => sum + audioTokens(f), 0);
  const usage = { prompt_tokens: prompt, completion_tokens: COMPLETION_TOKENS, total_tokens: prompt + COMPLETION_TOKENS };
  const message = { role: 'assistant', content: 'a tone' };
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'omni', choices: [{ index: 0, message, finish_reason: 'stop' }], usage }));
}

let upstream: Server;
let gw: TestGateway;

beforeAll(async () => {
  const started = await startRawUpstream(serve);
  upstream = started.server;
  gw = await startGateway({
    catalogue: () => ({
      providers: [{ id: 'host', type: 'openai', baseUrl: started.baseUrl, region: 'fr-par', apiKey: '' }],
      models: [
        {
          id: 'test/omni',
          kind: 'chat',
          owned_by: 'test',
          context_window: 32_000,
          capabilities: ['streaming'],
          offers: [{ provider: 'host', upstreamModel: 'omni', pricing: PRICE }],
        },
      ],
    }),
  });
}, 60_000);

afterAll(async () => {
  await gw?.close();
  upstream?.close();
});

type Part = OpenAI.Chat.Completions.ChatCompletionContentPart;

const ask = (part: Part) => [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'What is in this recording?' }, part] }];

/** A request's worst case at the offer's prices, as the gateway holds it. */
const worstOf = (messages: unknown[]) => (estimatePromptTokens({ messages }) * PRICE.prompt_per_1m + MAX_TOKENS * PRICE.completion_per_1m) / 1e6;

async function spentOf(id: string): Promise<number> {
  await gw.gateway.services.usage.flush();
  return (await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body.spent;
}

describe('inline WAV audio in a chat prompt', () => {
  // 10 s of 16 kHz 16-bit mono PCM: 320 KB, 320 tokens at its byte rate and 13,664 at the lowest speech rate.
  const plain = wav(10);
  // Core Audio's `JUNK` and a broadcast WAV's `bext` before the `fmt ` chunk, as those writers put them.
  const files = { JUNK: withChunkBeforeFmt(plain, 'JUNK', 28), bext: withChunkBeforeFmt(plain, 'bext', 602) };
  // Room for twice the hold of the same recording whose `fmt ` chunk comes first; far from the hold at the lowest speech rate.
  const budget = 2 * worstOf(ask({ type: 'input_audio', input_audio: { data: plain.toString('base64'), format: 'wav' } }));

  for (const [name, file] of Object.entries(files)) {
    it(`with a ${name} chunk before its fmt chunk is held at its own byte rate: served and billed as its 10 s, not refused 402`, async () => {
      const shapes: Part[] = [
        { type: 'input_audio', input_audio: { data: file.toString('base64'), format: 'wav' } },
        // Mistral's shape: the audio as a string, here a data URL.
        { type: 'input_audio', input_audio: `data:audio/wav;base64,${file.toString('base64')}` } as unknown as Part,
      ];
      for (const part of shapes) {
        const { id, key } = await gw.createKey({ budget, rateLimitRpm: 1000 });
        const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
        const answer = await client.chat.completions.create({ model: 'test/omni', max_tokens: MAX_TOKENS, messages: ask(part) });
        expect(answer.usage?.prompt_tokens).toBe(10 + 320);
        expect(await spentOf(id)).toBeCloseTo(((10 + 320) * PRICE.prompt_per_1m + COMPLETION_TOKENS * PRICE.completion_per_1m) / 1e6, 12);
      }
    });
  }
});

describe('audio and documents given by URL in a chat prompt', () => {
  const text = ask({ type: 'text', text: 'Please.' });
  // By URL the gateway sees no media, the provider fetches it and counts it: as an image (audio), as a page (a document).
  const byUrl: [string, Part, number][] = [
    ['audio (Mistral’s input_audio string)', { type: 'input_audio', input_audio: 'https://e.x/meeting.wav' } as unknown as Part, MEDIA_PART_TOKENS],
    ['audio (OpenAI’s input_audio object)', { type: 'input_audio', input_audio: { data: 'https://e.x/meeting.wav', format: 'wav' } }, MEDIA_PART_TOKENS],
    ['a document (Mistral’s document_url)', { type: 'document_url', document_url: 'https://e.x/report.pdf' } as unknown as Part, DOCUMENT_PAGE_TOKENS],
    ['a document (OpenAI’s file part)', { type: 'file', file: { file_data: 'https://e.x/report.pdf', filename: 'report.pdf' } }, DOCUMENT_PAGE_TOKENS],
  ];

  for (const [name, part, tokens] of byUrl) {
    it(`holds ${name} as what the provider counts for it, not its URL’s characters`, async () => {
      // Room for the same request without the part, and for half of what the part holds.
      const { key } = await gw.createKey({ budget: worstOf(text) + ((tokens / 2) * PRICE.prompt_per_1m) / 1e6, rateLimitRpm: 1000 });
      const client = new OpenAI({ apiKey: key, baseURL: gw.baseA, maxRetries: 0 });
      const create = (messages: ReturnType<typeof ask>) => client.chat.completions.create({ model: 'test/omni', max_tokens: MAX_TOKENS, messages });
      const refused = await create(ask(part)).then(
        () => null,
        (err: unknown) => err,
      );
      expect(refused).toBeInstanceOf(OpenAI.APIError);
      expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
      expect((refused as InstanceType<typeof OpenAI.APIError>).code).toBe('budget_exceeded');
      expect((await create(text)).choices[0]?.message.content).toBe('a tone');
      // With room for the part's hold it is served.
      const roomy = await gw.createKey({ budget: 2 * worstOf(ask(part)), rateLimitRpm: 1000 });
      const served = new OpenAI({ apiKey: roomy.key, baseURL: gw.baseA, maxRetries: 0 });
      expect((await served.chat.completions.create({ model: 'test/omni', max_tokens: MAX_TOKENS, messages: ask(part) })).usage?.prompt_tokens).toBe(10);
    });
  }
});
