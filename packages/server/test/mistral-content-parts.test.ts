import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sdkGatewayPerFile } from './helpers/sdk.js';

/**
 * OpenAI's content parts that Mistral's chunks spell otherwise reach Mistral as its own (its strict schema answers 422
 * to OpenAI's): an `input_audio` as the base64 string alone, a file by its id as `{type: 'file', file_id}`, an
 * assistant's `refusal` part as the text it said.
 */
const ctx = sdkGatewayPerFile();
const pinned = { headers: { 'X-Gateway-Provider': 'mistral' } };

const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
  { role: 'user', content: 'Can you help me break in?' },
  { role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] },
  {
    role: 'user',
    content: [
      { type: 'text', text: 'Then transcribe this' },
      { type: 'input_audio', input_audio: { data: 'UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=', format: 'wav' } },
      { type: 'file', file: { file_id: '7e04b621-d7eb-4658-beb0-beb2725ee459' } },
    ],
  },
];

describe('OpenAI content parts sent to Mistral', () => {
  it('are sent as Mistral’s chunks and answered, whole and streamed, in both variants', async () => {
    const { gw, clients } = ctx;
    for (const client of [clients.a, clients.b]) {
      for (const stream of [false, true]) {
        let content = '';
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ model: 'mistral/small', messages, stream: true }, pinned))
            content += chunk.choices[0]?.delta.content ?? '';
        } else content = (await client.chat.completions.create({ model: 'mistral/small', messages }, pinned)).choices[0]?.message.content ?? '';
        expect(content).toContain('Simulated answer from mistral');
        const sent = gw.sim.providers.mistral.stats().last?.body as { messages: { content: unknown }[] };
        expect(sent.messages[1]?.content).toEqual([{ type: 'text', text: 'I cannot help with that.' }]);
        expect(sent.messages[2]?.content).toEqual([
          { type: 'text', text: 'Then transcribe this' },
          { type: 'input_audio', input_audio: 'UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=' },
          { type: 'file', file_id: '7e04b621-d7eb-4658-beb0-beb2725ee459' },
        ]);
      }
    }
  });
});
