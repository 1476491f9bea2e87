import { Readable } from 'node:stream';
import type { ProviderConfig } from '@gw/schema';
import type { Simulator } from '@gw/simulator';
import { UpstreamError } from '../../src/errors/upstream-error.js';
import type { JsonResponse, ScannedResponse, UpstreamBody } from '../../src/providers/http-client.js';
import { ModelListScan, type ScannedList } from '../../src/providers/model-list-scan.js';
import type { ChatChunk, ChatStream, UpstreamCall } from '../../src/providers/types.js';
import { readableBody } from './readable-body.js';

/** The demo config's entry for one simulated provider (optionally with changes, e.g. a wrong key). */
export function providerConfig(sim: Simulator, id: string, change: Partial<ProviderConfig> = {}): ProviderConfig {
  const found = sim.demoConfig().providers.find((p) => p.id === id);
  if (!found) throw new Error(`no provider ${id}`);
  return { ...found, ...change };
}

export function call(upstreamModel: string): UpstreamCall {
  return { upstreamModel, signal: new AbortController().signal, requestId: 'req_test' };
}

/** A model list's 200 answer as the HTTP client scans it (a few bytes at a time), or another status read whole. */
export function scannedList(status: number, body: unknown, aliases = false): ScannedResponse<ScannedList> {
  if (status !== 200) return answer(status, body);
  const scan = new ModelListScan(aliases);
  const bytes = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  for (let i = 0; i < bytes.length; i += 3) if (!scan.write(bytes.subarray(i, i + 3))) break;
  return { status: 200, headers: {}, scanned: scan.end() };
}

/** A provider answer as the HTTP client hands it to an adapter. */
export function answer(status: number, body: unknown, headers: Record<string, string> = {}): JsonResponse {
  return { status, headers, body };
}

/** Runs `fn` and returns the UpstreamError it throws (fails the test if it does not). */
export async function upstreamError(fn: () => unknown): Promise<UpstreamError> {
  try {
    await fn();
  } catch (err) {
    if (err instanceof UpstreamError) return err;
    throw err;
  }
  throw new Error('expected an UpstreamError');
}

export async function collect(stream: ChatStream): Promise<ChatChunk[]> {
  const out: ChatChunk[] = [];
  for await (const chunk of stream) out.push(chunk);
  return out;
}

/** An SSE body made of `events` (each a data payload, or [event, data]), as undici hands it over. */
export function sseBody(events: (string | [string, string])[]): UpstreamBody {
  const text = events.map((e) => (typeof e === 'string' ? `data: ${e}\n\n` : `event: ${e[0]}\ndata: ${e[1]}\n\n`)).join('');
  const bytes = new TextEncoder().encode(text);
  const pieces: Uint8Array[] = [];
  // Split mid-event, as a network would.
  for (let i = 0; i < bytes.length; i += 37) pieces.push(bytes.subarray(i, i + 37));
  return readableBody(Readable.from(pieces, { objectMode: false }));
}
