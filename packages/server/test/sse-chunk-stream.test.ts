import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { UpstreamError } from '../src/errors/upstream-error.js';
import { UpstreamHttp } from '../src/providers/http-client.js';
import { openAiChunkStream } from '../src/providers/openai-compatible/stream.js';
import { MAX_EVENT_BYTES } from '../src/providers/sse-chunk-stream.js';
import type { ChatChunk } from '../src/providers/types.js';
import { readableBody } from './helpers/readable-body.js';

const http = new UpstreamHttp('scaleway', 'http://127.0.0.1:9', 1000);
const chunk = (content: string) =>
  JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content } }] });

/** Relays a body fed by hand; resolves with what the sink saw. */
function relay(body: PassThrough) {
  const seen: ChatChunk[] = [];
  const ended = new Promise<Error | null>((resolve) => {
    openAiChunkStream(http, readableBody(body)).relay({ chunk: (c) => seen.push(c), end: resolve });
  });
  return { seen, ended };
}

describe('pushing an upstream SSE body to a sink', () => {
  it('delivers each chunk as its bytes arrive, before the body ends', async () => {
    const body = new PassThrough();
    const { seen, ended } = relay(body);
    body.write(`data: ${chunk('a')}\n\n`);
    body.write(`data: ${chunk('b')}\n\ndata: ${chunk('c').slice(0, 20)}`);
    await new Promise((r) => setImmediate(r));
    expect(seen.map((c) => (c.choices[0] as { delta: { content: string } }).delta.content)).toEqual(['a', 'b']);
    body.end(`${chunk('c').slice(20)}\n\ndata: [DONE]\n\n`);
    expect(await ended).toBeNull();
    expect(seen).toHaveLength(3);
  });

  it('ends with a protocol error once one event outgrows its bound, rather than holding an endless line', async () => {
    const body = new PassThrough();
    const { seen, ended } = relay(body);
    body.write(`data: ${chunk('a')}\n\n`);
    body.write('data: {"x":"');
    const piece = 'a'.repeat(1024 * 1024);
    for (let i = 0; i <= MAX_EVENT_BYTES / piece.length && !body.destroyed; i++) {
      body.write(piece);
      await new Promise((r) => setImmediate(r));
    }
    const err = (await ended) as UpstreamError;
    expect([err.kind, err.message]).toEqual(['protocol', 'scaleway sent an event larger than 16 MiB']);
    expect(body.destroyed).toBe(true);
    expect(seen).toHaveLength(1);
  });

  it('relays at [DONE] what the <think> splitter still held, for a stream whose choices gave no finish reason', async () => {
    const text = (chunks: ChatChunk[], field: 'content' | 'reasoning_content') =>
      chunks.map((c) => c.choices.map((x) => (x as { delta: Record<string, string> }).delta[field] ?? '').join('')).join('');
    for (const [pieces, content, reasoning] of [
      [[' '], ' ', ''],
      [['<'], '<', ''],
      [['<think>', 'plan</th'], '', 'plan</th'],
    ] as const) {
      const body = new PassThrough();
      const { seen, ended } = relay(body);
      for (const piece of pieces) body.write(`data: ${chunk(piece)}\n\n`);
      body.end('data: [DONE]\n\n');
      expect(await ended).toBeNull();
      expect([pieces, text(seen, 'content'), text(seen, 'reasoning_content')]).toEqual([pieces, content, reasoning]);
    }
  });

  it('ends with a protocol error when the body ends before [DONE]', async () => {
    const body = new PassThrough();
    const { ended } = relay(body);
    body.end(`data: ${chunk('a')}\n\n`);
    const err = await ended;
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).kind).toBe('protocol');
  });

  it('ends as aborted when the body is destroyed (the gateway let go of it), and with the error when the connection fails', async () => {
    const cut = new PassThrough();
    const a = relay(cut);
    cut.write(`data: ${chunk('a')}\n\n`);
    cut.destroy();
    expect(((await a.ended) as UpstreamError).kind).toBe('aborted');
    const failed = new PassThrough();
    const b = relay(failed);
    failed.destroy(Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }));
    expect(((await b.ended) as UpstreamError).kind).toBe('connect');
  });

  it('ends with the provider error on an error event, and a sink that throws ends the stream instead of escaping', async () => {
    const body = new PassThrough();
    const { ended } = relay(body);
    body.write(`data: ${JSON.stringify({ error: { message: 'overloaded' } })}\n\n`);
    expect(((await ended) as UpstreamError).message).toMatch(/overloaded/);
    expect(body.destroyed).toBe(true);
    const thrower = new PassThrough();
    const result = new Promise<Error | null>((resolve) => {
      openAiChunkStream(http, readableBody(thrower)).relay({
        chunk: () => {
          throw new Error('sink bug');
        },
        end: resolve,
      });
    });
    thrower.write(`data: ${chunk('a')}\n\n`);
    expect((await result)?.message).toBe('sink bug');
  });

  it('fails on vLLM’s mid-stream error object, which comes without an error key and is followed by [DONE], and lets a null error field pass', async () => {
    const body = new PassThrough();
    const { seen, ended } = relay(body);
    body.write(
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', error: null, choices: [{ index: 0, delta: { content: 'The answer is' } }] })}\n\n`,
    );
    body.end(
      `data: ${JSON.stringify({ object: 'error', message: 'Internal server error.', type: 'InternalServerError', param: null, code: 500 })}\n\ndata: [DONE]\n\n`,
    );
    const err = await ended;
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).message).toMatch(/sent an error in its stream: Internal server error\./);
    expect(seen).toHaveLength(1);
  });
});
