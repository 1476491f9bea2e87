import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startGateway();
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

/** Holds the event loop, as a burst of requests read in one turn does on a saturated core. */
function hold(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // The event loop is held.
  }
}

describe('a key read from the store while the event loop is held', () => {
  it('is not taken for a store that does not answer when its answer came during the hold', async () => {
    // A key not cached yet (a burst right after a start, or a new key): the request reads it from the store, with a
    // 2 s bound. The loop is then held past that bound, as on a saturated core; the store answers within
    // milliseconds, but Node runs due timers before it reads what came meanwhile.
    const { key } = await gw.createKey();
    const keys = gw.gateway.services.store.keys;
    const getByHash = keys.getByHash.bind(keys);
    let held = false;
    keys.getByHash = (hash) => {
      const read = getByHash(hash);
      if (!held) {
        held = true;
        // After the bound's timer is armed (it is, once this read has begun), with the read on its way.
        queueMicrotask(() => hold(2_300));
      }
      return read;
    };
    try {
      const res = await fetch(`${gw.baseA}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mistral/small', messages: [{ role: 'user', content: 'Bonjour' }] }),
      });
      const body = await res.text();
      expect(held).toBe(true);
      expect(res.status, body).toBe(200);
    } finally {
      keys.getByHash = getByHash;
    }
  });
});
