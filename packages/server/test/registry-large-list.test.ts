import type { Server } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_LISTED_ID_CHARS, MAX_LISTED_MODELS } from '../src/providers/model-list-scan.js';
import { startGateway, type TestGateway } from './helpers/gateway.js';
import { startRawUpstream } from './helpers/raw-upstream.js';

// An aggregator whose model list has 60,000 entries (~24 MB of JSON), of which the catalogue serves one.
const ENTRIES = 60_000;
const DESCRIPTION = 'A general-purpose model served through this aggregator, tuned for instruction following and tool use. '.repeat(2);
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
let gw: TestGateway;
let host: Server;
/** What the aggregator answers at GET /models now. */
let list: Buffer;
/** The list is sent gzip-encoded, as a proxy in front of a provider may send it though identity was asked for. */
let gzipped = false;

/** The entries of each size made so far, as an aggregator's (a description, prices): made once, as they take a while. */
const made = new Map<number, string>();

/** The list's bytes: `extra` ids first, then `entries` entries. */
function bigList(entries: number, extra: string[]): Buffer {
  let bulk = made.get(entries);
  if (bulk === undefined) {
    const data: string[] = [];
    for (let i = 0; i < entries; i++) {
      data.push(
        `{"id":"vendor-${i % 500}/model-${i}","object":"model","created":${1_700_000_000 + i},"owned_by":"vendor-${i % 500}","description":"${DESCRIPTION}","context_length":32768,"pricing":{"prompt":"0.000001","completion":"0.000002"}}`,
      );
    }
    bulk = data.join(',');
    made.set(entries, bulk);
  }
  return Buffer.from(`{"object":"list","data":[${extra.map((id) => `{"id":"${id}","object":"model"},`).join('')}${bulk}]}`);
}

beforeAll(async () => {
  list = bigList(10, ['agg-chat']);
  const upstream = await startRawUpstream((req, res) => {
    if (!req.url?.endsWith('/models')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', ...(gzipped ? { 'content-encoding': 'gzip' } : {}) });
    res.end(gzipped ? gzipSync(list) : list);
  });
  host = upstream.server;
  gw = await startGateway({
    catalogue: (c) => {
      c.providers.push({ id: 'agg', type: 'openai', baseUrl: upstream.baseUrl, region: 'eu', vendor: 'generic' });
      c.models.push({
        id: 'agg/chat',
        kind: 'chat',
        owned_by: 'agg',
        offers: [{ provider: 'agg', upstreamModel: 'agg-chat', pricing: { prompt_per_1m: 1, completion_per_1m: 1, currency: 'EUR' } }],
      });
      return c;
    },
  });
}, 60_000);
afterAll(async () => {
  await gw?.close();
  host?.close();
});

/**
 * The most CPU this thread spent in one turn of the event loop while it runs (a timer ticks every turn it can): what a
 * request arriving then waits for. Counted in CPU, not wall time, so that a busy machine's waits for a core do not count.
 */
function longestTurn(): () => number {
  let last = process.threadCpuUsage();
  let longest = 0;
  let timer: NodeJS.Timeout;
  const tick = () => {
    const now = process.threadCpuUsage();
    longest = Math.max(longest, now.user - last.user + (now.system - last.system));
    last = now;
    timer = setTimeout(tick, 1);
  };
  timer = setTimeout(tick, 1);
  return () => {
    clearTimeout(timer);
    return longest / 1000;
  };
}

const rebuild = () => gw.admin<{ providers: Record<string, string>; unlisted: string[] }>('POST', '/registry/rebuild');

async function served(model: string): Promise<number> {
  const { key } = await gw.createKey();
  const res = await fetch(`${gw.baseA}/models/${encodeURIComponent(model)}`, { headers: { authorization: `Bearer ${key}` } });
  await res.arrayBuffer();
  return res.status;
}

describe("a provider's model list of tens of thousands of entries", () => {
  it('is read at a rebuild without holding the event loop: no turn takes 50 ms of CPU, and its model is served', async () => {
    list = bigList(ENTRIES, ['agg-chat']);
    // The test's own garbage (the list made) is not the gateway's to collect while it reads.
    gc();
    const stop = longestTurn();
    const rebuilt = await rebuild();
    const longest = stop();
    expect(rebuilt.body.providers.agg).toBe('ok');
    expect(await served('agg/chat')).toBe(200);
    // Parsed whole, the list held one turn for 110 ms of CPU (120,000 entries: 230 ms, and up to 650 ms of wall time).
    expect(longest).toBeLessThan(50);
    // Read again unchanged, the list the store keeps (megabytes of ids) is not written again.
    const settings = gw.gateway.services.store.settings;
    const set = settings.set.bind(settings);
    const written: string[] = [];
    settings.set = (name, value) => {
      written.push(name);
      return set(name, value);
    };
    try {
      expect((await rebuild()).body.providers.agg).toBe('ok');
    } finally {
      settings.set = set;
    }
    expect(written).toEqual([]);
    // A change far down the list is read as one: the model leaves when its id does.
    list = bigList(ENTRIES, ['another-chat']);
    expect((await rebuild()).body.unlisted).toContain('agg/chat');
    expect(await served('agg/chat')).toBe(404);
  }, 20_000);

  it(`is refused past ${MAX_LISTED_MODELS} entries or 32 MiB of ids, the provider's last list kept`, async () => {
    list = bigList(10, ['agg-chat']);
    expect((await rebuild()).body.providers.agg).toBe('ok');
    list = Buffer.from(`{"object":"list","data":[${'{"id":"m"},'.repeat(MAX_LISTED_MODELS)}{"id":"agg-chat"}]}`);
    const rebuilt = await rebuild();
    expect(rebuilt.body.providers.agg).toBe('stale');
    expect(await served('agg/chat')).toBe(200);
    const ready = (await (await fetch(`${gw.url}/readyz`)).json()) as { modelLists: Record<string, string> };
    expect(ready.modelLists).toEqual({ agg: 'stale' });
    // Fewer entries, but more id text than the gateway holds (the answer's bytes are not bounded otherwise).
    const long = 'x'.repeat(1000);
    const ids = Array.from({ length: Math.ceil(MAX_LISTED_ID_CHARS / 1000) + 10 }, (_, i) => `{"id":"${i}${long}"}`);
    list = Buffer.from(`{"object":"list","data":[{"id":"agg-chat"},${ids.join(',')}]}`);
    expect((await rebuild()).body.providers.agg).toBe('stale');
    expect(await served('agg/chat')).toBe(200);
  });

  it('is read the same when a proxy sends it gzip-encoded, decoded and scanned in slices', async () => {
    gzipped = true;
    try {
      list = bigList(1000, ['another-chat']);
      expect((await rebuild()).body.unlisted).toContain('agg/chat');
      list = bigList(1000, ['agg-chat']);
      expect((await rebuild()).body.providers.agg).toBe('ok');
      expect(await served('agg/chat')).toBe(200);
      // A broken list is refused encoded too: the last one kept.
      list = Buffer.from('{"object":"list","data":[{"id":"x"}');
      expect((await rebuild()).body.providers.agg).toBe('stale');
      expect(await served('agg/chat')).toBe(200);
    } finally {
      gzipped = false;
    }
  });
});
