import { describe, expect, it } from 'vitest';
import { chunkJson, keepWireText, spliceModel } from '../src/providers/chunk-json.js';
import { openAiDecoder } from '../src/providers/openai-compatible/stream.js';
import { SSE_DONE } from '../src/providers/sse-chunk-stream.js';
import type { ChatChunk } from '../src/providers/types.js';

const decode = openAiDecoder('scaleway');

function relayed(data: string): string[] {
  const out = decode({ data, event: undefined, id: undefined });
  if (out === SSE_DONE) throw new Error('unexpected [DONE]');
  return out.map((c: ChatChunk) => chunkJson(c, 'gw/model'));
}

describe('relaying a chunk without serialising it again', () => {
  it('relays an unchanged chunk as the provider wrote it, with only the model name rewritten', () => {
    const wire =
      '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"llama-3.1-8b","system_fingerprint":"fp_x","choices":[{"index":0,"delta":{"content":"Hi \\"model\\":\\"llama-3.1-8b\\""},"logprobs":null,"finish_reason":null}]}';
    const [out] = relayed(wire);
    expect(out).toBe(wire.replace('"model":"llama-3.1-8b",', '"model":"gw/model",'));
    // The same text in the content is left alone.
    expect(JSON.parse(out as string).choices[0].delta.content).toBe('Hi "model":"llama-3.1-8b"');
  });

  it('serialises a chunk the adapter changed (reasoning renamed, usage split off)', () => {
    const reasoning = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"think"}}]}';
    expect(JSON.parse(relayed(reasoning)[0] as string).choices[0].delta).toEqual({ reasoning_content: 'think' });
    const withUsage =
      '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}';
    const [content, usage] = relayed(withUsage).map((t) => JSON.parse(t));
    expect(content.usage).toBeNull();
    expect(usage.choices).toEqual([]);
    expect(usage.model).toBe('gw/model');
  });

  it('serialises a copy of a kept chunk that changed it, and never shows the kept text in the chunk', () => {
    const wire = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"old"}}]}';
    const kept = keepWireText(JSON.parse(wire) as ChatChunk, wire);
    expect(chunkJson(kept, 'x')).toBe(wire.replace('"model":"m"', '"model":"x"'));
    const changed: ChatChunk = { ...kept, choices: [{ index: 0, delta: { content: 'new' } }] };
    expect(JSON.parse(chunkJson(changed, 'x')).choices[0].delta.content).toBe('new');
    expect(Object.keys(kept)).toEqual(['id', 'object', 'created', 'model', 'choices']);
    expect(JSON.stringify(kept)).toBe(wire);
  });

  it('splices only a single top-level compact model pair, and never into text with a line break', () => {
    expect(spliceModel('{"a":{"model":"m"},"model":"m"}', 'm', 'x')).toBeNull();
    expect(spliceModel('{"a":{"model":"m"},"b":1}', 'm', 'x')).toBeNull();
    expect(spliceModel('{"a":"{\\"b\\":1}","model":"m"}', 'm', 'x')).toBe('{"a":"{\\"b\\":1}","model":"x"}');
    expect(spliceModel('{"model": "m"}', 'm', 'x')).toBeNull();
    expect(spliceModel('{"model":"m",\n"id":"c"}', 'm', 'x')).toBeNull();
    // A chunk without the provider's text (or whose text cannot be spliced) is serialised.
    const chunk: ChatChunk = { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [] };
    expect(JSON.parse(chunkJson(chunk, 'x')).model).toBe('x');
  });
});
