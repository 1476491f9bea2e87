import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { beforeEach, describe, expect, it } from 'vitest';
import { resetProviders } from './helpers/gateway.js';
import { sdkGatewayPerFile } from './helpers/sdk.js';

// A message's content parts are checked as OpenAI's API checks them, for each role's part types, before any provider is
// asked: a provider may take a part it does not know (the simulated vLLM host answered 200), or refuse it in its own words.
const ctx = sdkGatewayPerFile();
beforeEach(() => resetProviders(ctx.gw.sim));

const variants = [
  ['A', 'validation_error'],
  ['B', 'invalid_request'],
] as const;
const client = (variant: 'A' | 'B') => (variant === 'A' ? ctx.clients.a : ctx.clients.b);
const chats = () => Object.values(ctx.gw.sim.providers).reduce((n, p) => n + (p?.stats().byEndpoint.chat ?? 0), 0);
const pin = (provider: string) => ({ headers: { 'X-Gateway-Provider': provider } });
const user = (parts: unknown[]) => [{ role: 'user', content: parts }];

async function refusal(variant: 'A' | 'B', messages: unknown[], provider: string) {
  const err = await client(variant)
    .chat.completions.create({ model: 'mistral/small', messages: messages as ChatCompletionMessageParam[], max_tokens: 5 }, pin(provider))
    .then(
      () => null,
      (e: unknown) => e,
    );
  if (!(err instanceof OpenAI.BadRequestError)) throw new Error(`expected a 400, got ${String(err)}`);
  return { code: err.code, param: err.param, message: (err.error as { message?: string }).message };
}

const USER_TYPES = '"text", "image_url", "input_audio", "file", "document_url"';

describe('content parts a role does not take, or without their own field', () => {
  const cases: [string, unknown[], string, string][] = [
    ['an unknown type', user([{ type: 'hologram' }]), 'messages.0.content.0.type', `has a value that is not allowed (allowed: ${USER_TYPES})`],
    ['a part without a type', user([{ text: 'hi' }]), 'messages.0.content.0.type', 'is required'],
    ['an image part without its image_url', user([{ type: 'image_url' }]), 'messages.0.content.0.image_url', 'is required'],
    ['an image_url without its url', user([{ type: 'image_url', image_url: {} }]), 'messages.0.content.0.image_url.url', 'is required'],
    ['a text part without its text', user([{ type: 'text' }]), 'messages.0.content.0.text', 'is required'],
    ['a text that is no string', user([{ type: 'text', text: 5 }]), 'messages.0.content.0.text', 'must be string'],
    ['audio without its format', user([{ type: 'input_audio', input_audio: { data: 'UklGRg==' } }]), 'messages.0.content.0.input_audio.format', 'is required'],
    ['a file part without its file', user([{ type: 'text', text: 'read' }, { type: 'file' }]), 'messages.0.content.1.file', 'is required'],
    [
      'a file with neither its data nor its id',
      user([{ type: 'file', file: { filename: 'a.pdf' } }]),
      'messages.0.content.0.file.file_data',
      "is required (or 'file_id')",
    ],
    [
      "an image detail OpenAI's API does not take",
      user([{ type: 'image_url', image_url: { url: 'https://e.x/a.png', detail: 'ultra' } }]),
      'messages.0.content.0.image_url.detail',
      'has a value that is not allowed (allowed: "auto", "low", "high", "original")',
    ],
    [
      'an audio format no host reads',
      user([{ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'banana' } }]),
      'messages.0.content.0.input_audio.format',
      'has a value that is not allowed (allowed: "wav", "mp3", "flac", "m4a", "mp4", "mpeg", "mpga", "oga", "ogg", "webm")',
    ],
    [
      "an image in a system message (text only, as OpenAI's)",
      [
        { role: 'system', content: [{ type: 'image_url', image_url: { url: 'https://e.x/a.png' } }] },
        { role: 'user', content: 'hi' },
      ],
      'messages.0.content.0.type',
      'has a value that is not allowed (allowed: "text")',
    ],
    [
      'an image in an assistant message',
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'image_url', image_url: { url: 'https://e.x/a.png' } }] },
        { role: 'user', content: 'and?' },
      ],
      'messages.1.content.0.type',
      'has a value that is not allowed (allowed: "text", "refusal", "thinking")',
    ],
    [
      'a refusal in a user message',
      user([{ type: 'refusal', refusal: 'no' }]),
      'messages.0.content.0.type',
      `has a value that is not allowed (allowed: ${USER_TYPES})`,
    ],
  ];
  for (const [variant, code] of variants) {
    for (const provider of ['scaleway', 'mistral']) {
      it.each(cases)(`${variant} via ${provider}: %s is refused naming the part's field`, async (_what, messages, param, detail) => {
        expect(await refusal(variant, messages, provider)).toEqual({ code, param, message: `Invalid body: '${param}' ${detail}.` });
        expect(chats()).toBe(0);
      });
    }
  }
});

describe("each role's part types, in OpenAI's shapes and Mistral's", () => {
  const history = [
    { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
    { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What are these?' },
        { type: 'image_url', image_url: { url: 'https://e.x/a.png', detail: 'low' } },
        { type: 'image_url', image_url: 'https://e.x/b.png' },
        { type: 'input_audio', input_audio: { data: 'UklGRiQAAABXQVZF', format: 'wav' } },
        { type: 'input_audio', input_audio: 'https://e.x/meeting.wav' },
        { type: 'file', file: { filename: 'a.pdf', file_data: 'data:application/pdf;base64,JVBERi0=' } },
        { type: 'document_url', document_url: 'https://e.x/report.pdf' },
      ],
    },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] },
        { type: 'refusal', refusal: 'I cannot say.' },
        { type: 'text', text: 'Pictures.' },
      ],
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'look', arguments: '{}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: 'two cats' }] },
  ] as unknown as ChatCompletionMessageParam[];

  for (const [variant] of variants) {
    it(`${variant}: are taken and reach the provider`, async () => {
      const got = await client(variant).chat.completions.create({ model: 'mistral/small', messages: history, max_tokens: 5 }, pin('scaleway'));
      expect(got.choices[0]?.finish_reason).toBeTruthy();
      const sent = ctx.gw.sim.providers['scaleway']?.stats().last?.body as { messages: { content: unknown }[] };
      expect(sent.messages[2]?.content).toEqual((history[2] as { content: unknown }).content);
    });
  }
});

describe('content OpenAI takes, which stays taken', () => {
  const tool = [{ id: 'call12345', type: 'function', function: { name: 'look', arguments: '{}' } }];
  const cases: [string, unknown[]][] = [
    [
      'an image of each detail',
      user(['auto', 'low', 'high', 'original'].map((detail) => ({ type: 'image_url', image_url: { url: 'https://e.x/a.png', detail } }))),
    ],
    [
      'audio as mp3 and as flac',
      user([
        { type: 'input_audio', input_audio: { data: 'SUQz', format: 'mp3' } },
        { type: 'input_audio', input_audio: { data: 'ZkxhQw==', format: 'flac' } },
      ]),
    ],
    ['a file by its id', user([{ type: 'file', file: { file_id: 'file-abc' } }])],
    [
      'an empty text part',
      user([
        { type: 'text', text: '' },
        { type: 'text', text: 'hi' },
      ]),
    ],
    [
      "an assistant's text beside its tool calls",
      [
        { role: 'user', content: 'look' },
        { role: 'assistant', content: [{ type: 'text', text: 'Looking.' }], tool_calls: tool },
        { role: 'tool', tool_call_id: 'call12345', content: 'two cats' },
      ],
    ],
    // OpenAI's API answers 200 for an empty parts array in any role (openai/openai-python#1812), so the gateway does too.
    [
      'empty content arrays in every role',
      [
        { role: 'system', content: [] },
        { role: 'developer', content: [] },
        { role: 'user', content: [] },
        { role: 'user', content: 'look' },
        { role: 'assistant', content: [], tool_calls: tool },
        { role: 'tool', tool_call_id: 'call12345', content: [] },
      ],
    ],
  ];
  for (const [variant] of variants) {
    for (const provider of ['scaleway', 'mistral']) {
      it.each(cases)(`${variant} via ${provider}: %s`, async (_what, messages) => {
        const got = await client(variant).chat.completions.create(
          { model: 'mistral/small', messages: messages as ChatCompletionMessageParam[], max_tokens: 5 },
          pin(provider),
        );
        expect(got.choices[0]?.finish_reason).toBeTruthy();
        expect(chats()).toBe(1);
      });
    }
  }
});
