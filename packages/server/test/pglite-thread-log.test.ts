import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgliteThread } from '../src/store/pglite-client.js';
import type { StoreLog } from '../src/store/types.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

// The embedded gateway's own database thread, taken as the gateway hands it its logger; the lines it writes, kept.
const lines: { level: string; fields: object; message: string }[] = [];
let thread: PgliteThread | null = null;
const logTo = PgliteThread.prototype.logTo;
PgliteThread.prototype.logTo = function (this: PgliteThread, log: StoreLog) {
  thread = this;
  const keep =
    (level: keyof StoreLog) =>
    (fields: object, message: string): void => {
      lines.push({ level, fields, message });
      log[level](fields, message);
    };
  logTo.call(this, { error: keep('error'), warn: keep('warn'), info: keep('info') });
};

let gw: TestGateway;
beforeAll(async () => {
  gw = await startGateway();
}, 60_000);
afterAll(async () => {
  PgliteThread.prototype.logTo = logTo;
  await gw?.close();
});

describe("the embedded database thread's death", () => {
  it('is logged as an error, and its restart at info, while /readyz says the store is unreachable until then', async () => {
    expect(thread).not.toBeNull();
    const ready = async () => ((await (await fetch(`${gw.url}/readyz`)).json()) as { store: string }).store;
    expect(await ready()).toBe('ok');
    await thread?.crashForTest();
    expect(await ready()).toBe('unreachable');
    await eventually(async () => expect(await ready()).toBe('ok'), 20_000);
    expect(lines.map((l) => [l.level, l.message])).toEqual([
      ['error', 'the embedded database thread stopped; starting it again (until then the store is unreachable: cached keys serve, usage records wait)'],
      ['info', 'the embedded database thread started again'],
    ]);
    expect(lines[1]?.fields).toEqual({ restarts: 1 });
  }, 30_000);
});
