import { type Simulator, startSimulator } from '@gw/simulator';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { splitThinkTags, ThinkTagSplitter } from '../src/providers/think-tags.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { openAiClients } from './helpers/sdk.js';

/** Feeds `pieces` as a stream's content deltas and returns what reasoning and content came out, all told. */
function streamed(pieces: string[]): { reasoning: string; content: string } {
  const splitter = new ThinkTagSplitter();
  const out = { reasoning: '', content: '' };
  for (const piece of pieces) {
    const r = splitter.push(piece);
    out.reasoning += r.reasoning;
    out.content += r.content;
  }
  const rest = splitter.flush();
  return { reasoning: out.reasoning + rest.reasoning, content: out.content + rest.content };
}

const R1 = '<think>\nThe user greets me.\nI greet back.\n</think>\n\nBonjour !';

describe('reasoning between <think> tags', () => {
  it('splits a whole answer: the tags and the whitespace around them go', () => {
    expect(splitThinkTags(R1)).toEqual({ reasoning: 'The user greets me.\nI greet back.', content: 'Bonjour !' });
    expect(splitThinkTags('  <think>cut off while thin')).toEqual({ reasoning: 'cut off while thin', content: '' });
  });

  it('leaves content that does not open with the tag as it is, whatever it says later', () => {
    for (const text of ['Bonjour', 'Use <think> tags like this: <think>x</think>', '', 'a </think> b']) {
      expect(splitThinkTags(text)).toEqual({ reasoning: null, content: text });
    }
  });

  it('gives a stream the same split wherever its deltas cut the text, tags included', () => {
    const whole = splitThinkTags(R1);
    for (let a = 1; a < R1.length; a++) {
      for (const b of [a + 1, a + 3, a + 9]) {
        expect(streamed([R1.slice(0, a), R1.slice(a, b), R1.slice(b)])).toEqual(whole);
      }
    }
    expect(streamed([...R1])).toEqual(whole);
    // Whitespace before the tag, in a delta of its own: dropped, as from the whole answer, not sent ahead as content.
    expect(streamed(['\n', `\n${R1}`])).toEqual(splitThinkTags(`\n\n${R1}`));
  });

  it('passes a stream without the tag at once, a held "<" included, and then changes nothing', () => {
    const splitter = new ThinkTagSplitter();
    expect(splitter.push('<')).toEqual({ reasoning: '', content: '' });
    expect(splitter.push('b>bold</b>')).toEqual({ reasoning: '', content: '<b>bold</b>' });
    expect(splitter.passing).toBe(true);
    expect(streamed(['\n', 'Hello'])).toEqual({ reasoning: '', content: '\nHello' });
    // Whitespace is held until the next delta tells (a tag may follow), and given back at the choice's end.
    expect(streamed(['\n'])).toEqual({ reasoning: '', content: '\n' });
    expect(streamed(['<thi'])).toEqual({ reasoning: '', content: '<thi' });
  });

  it('holds back only the few whitespace characters that end the reasoning so far, until the next delta tells', () => {
    const splitter = new ThinkTagSplitter();
    expect(splitter.push('<think>\nFirst step.\n')).toEqual({ reasoning: 'First step.', content: '' });
    // Reasoning that goes on gets its whitespace back, in its place.
    expect(splitter.push('\nSecond step.\n\n')).toEqual({ reasoning: '\n\nSecond step.', content: '' });
    expect(splitter.push('</think>\n\nAnswer')).toEqual({ reasoning: '', content: 'Answer' });
    // A longer run of whitespace is reasoning that goes on: passed as it comes rather than held.
    const long = new ThinkTagSplitter();
    expect(long.push(`<think>x${' '.repeat(40)}`)).toEqual({ reasoning: `x${' '.repeat(40)}`, content: '' });
  });

  it('keeps a stream cut off while thinking as reasoning, a closing tag in pieces included', () => {
    expect(streamed(['<think>', 'still going </thi'])).toEqual({ reasoning: 'still going </thi', content: '' });
  });
});

describe('reasoning between <think> tags, through the gateway with the openai SDK', () => {
  let sim: Simulator;
  let gw: TestGateway;
  let client: OpenAI;

  beforeAll(async () => {
    sim = await startSimulator({ latencyScale: 0 });
    // OVHcloud and Nebius serving an R1 distill without a reasoning parser: `<think>\n…\n</think>\n\n` opens the content.
    for (const id of ['ovh', 'nebius'] as const) sim.providers[id]?.configure({ reasoningStyle: 'think_tags' });
    gw = await startGateway({ sim });
    client = openAiClients(gw, (await gw.createKey({ rateLimitRpm: 10_000 })).key).a;
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
    await sim?.close();
  });

  it.each(['ovh', 'nebius'])(
    '%s: reasoning_content and content carry no tag and no newline left from around the tags, whole and streamed',
    async (provider) => {
      const req = { model: 'deepseek/r1-distill-70b', messages: [{ role: 'user' as const, content: 'Bonjour, how are you' }] };
      const headers = { 'X-Gateway-Provider': provider };
      const whole = await client.chat.completions.create(req, { headers });
      const message = whole.choices[0]?.message as { content: string; reasoning_content?: string };
      // As DeepSeek's own API gives it: the reasoning without the tags and the whitespace inside them, the answer after them.
      expect(message.reasoning_content).toBe('The user asks about Bonjour how are you. A short direct answer fits best.');
      expect(message.content).toBe(
        `Simulated answer from ${provider} (${sim.providers[provider]?.models().find((m) => /R1-Distill/.test(m))}) about: Bonjour how are you.`,
      );
      const stream = await client.chat.completions.create({ ...req, stream: true }, { headers });
      let reasoning = '';
      let content = '';
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
        reasoning += delta?.reasoning_content ?? '';
        content += delta?.content ?? '';
      }
      expect({ reasoning, content }).toEqual({ reasoning: message.reasoning_content, content: message.content });
    },
  );
});
