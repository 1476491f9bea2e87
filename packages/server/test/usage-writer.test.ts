import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UsageSpill } from '../src/jobs/usage-spill.js';
import { UsageWriter } from '../src/jobs/usage-writer.js';
import { openStore, type Store, type UsageRecord } from '../src/store/index.js';

const execFileP = promisify(execFile);

let dir: string;
let store: Store;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gw-usage-writer-'));
  store = await openStore({ dataDir: dir });
  await store.migrate();
}, 60_000);
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const record = (requestId: string, cost: number): UsageRecord => ({
  requestId,
  keyId: 'k_writer',
  workspaceId: null,
  kind: 'chat',
  model: 'm',
  provider: 'p',
  promptTokens: 1,
  completionTokens: 1,
  totalTokens: 2,
  units: 0,
  cost,
  latencyMs: 1,
  status: 200,
  errorCode: null,
  streamed: false,
  createdAt: new Date(),
});

describe('the usage writer', () => {
  it('flush() writes what was recorded before it, even while an earlier write is still busy', async () => {
    // The first write waits on a gate: a slow database at exactly that moment.
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let writes = 0;
    const slow: Store = {
      ...store,
      usage: {
        ...store.usage,
        insertMany: async (records: UsageRecord[]) => {
          if (++writes === 1) await gate;
          return store.usage.insertMany(records);
        },
      },
    } as Store;
    const writer = new UsageWriter(slow, { flushIntervalMs: 60_000, maxBatch: 500, onError: () => {} });
    writer.record(record('req_first', 0.01));
    const first = writer.flush();
    while (writes === 0) await new Promise((r) => setImmediate(r));
    // The first flush is writing; a new record comes.
    writer.record(record('req_second', 0));
    const second = writer.flush();
    setTimeout(open, 50);
    await second;
    expect((await store.usage.list({ requestId: 'req_second' })).map((r) => r.requestId)).toEqual(['req_second']);
    await first;
    expect(writer.pending).toBe(0);
  });
  it('writes the records there when a flush began, in batches, and leaves those recorded meanwhile to the next flush', async () => {
    const batches: number[] = [];
    let late = 0;
    const counting: Store = {
      ...store,
      usage: {
        ...store.usage,
        insertMany: async (records: UsageRecord[]) => {
          batches.push(records.length);
          // Requests keep finishing while the first three batches are written.
          if (batches.length <= 3) for (let i = 0; i < 3; i++) writer.record(record(`req_late_${late++}`, 0));
          return store.usage.insertMany(records);
        },
      },
    } as Store;
    const writer = new UsageWriter(counting, { flushIntervalMs: 60_000, maxBatch: 2, onError: () => {} });
    for (let i = 0; i < 5; i++) writer.record(record(`req_early_${i}`, 0));
    await writer.flush();
    expect(batches).toEqual([2, 2, 1]);
    expect(writer.pending).toBe(9);
    expect((await store.usage.list({ keyId: 'k_writer' })).filter((r) => r.requestId.startsWith('req_early_'))).toHaveLength(5);
    await writer.flush();
    expect(batches).toEqual([2, 2, 1, 2, 2, 2, 2, 1]);
    expect(writer.pending).toBe(0);
    expect((await store.usage.list({ keyId: 'k_writer' })).filter((r) => r.requestId.startsWith('req_late_'))).toHaveLength(9);
  });
  it('keeps a batch whose write failed, writes it once the database answers, and adds its spend once', async () => {
    const key = await store.keys.create({ id: 'key_writer_retry', name: null, workspaceId: null, hash: 'h_writer_retry', rateLimitRpm: 60, budget: null });
    let failures = 2;
    const errors: unknown[] = [];
    const flaky: Store = {
      ...store,
      usage: {
        ...store.usage,
        insertMany: async (records: UsageRecord[]) => {
          // The first failure commits before it fails (an answer lost on the way back): the retry must add no spend twice.
          if (failures === 2) await store.usage.insertMany(records);
          if (failures-- > 0) throw new Error('connection lost');
          return store.usage.insertMany(records);
        },
      },
    } as Store;
    const writer = new UsageWriter(flaky, { flushIntervalMs: 60_000, maxBatch: 500, onError: (e) => errors.push(e) });
    const before = Date.now();
    expect(writer.storedBefore).toBeGreaterThanOrEqual(before);
    writer.record({ ...record('req_retry_1', 0.25), keyId: key.id });
    const recordedAt = Date.now();
    writer.record({ ...record('req_retry_2', 0.5), keyId: key.id });
    // Not stored yet: nothing recorded since `before` counts as stored (the budget leases wait for it).
    expect(writer.storedBefore).toBeLessThan(before + 1);
    await writer.flush();
    await writer.flush();
    expect(writer.pending).toBe(2);
    expect(writer.storedBefore).toBeLessThan(before + 1);
    await new Promise((r) => setTimeout(r, 2));
    await writer.flush();
    expect(writer.pending).toBe(0);
    expect(writer.storedBefore).toBeGreaterThan(recordedAt);
    expect(errors).toHaveLength(2);
    expect((await store.usage.list({ keyId: key.id })).map((r) => r.requestId).sort()).toEqual(['req_retry_1', 'req_retry_2']);
    expect((await store.keys.getById(key.id))?.spent).toBe(0.75);
  });

  it('puts a batch the database refused on disk, keeps storedBefore behind it, and stores it once when the database answers, after a restart too', async () => {
    const key = await store.keys.create({ id: 'key_writer_spill', name: null, workspaceId: null, hash: 'h_writer_spill', rateLimitRpm: 60, budget: null });
    const spillDir = join(dir, 'spill');
    let down = true;
    const flaky: Store = {
      ...store,
      usage: {
        ...store.usage,
        insertMany: async (records: UsageRecord[]) => {
          if (down) throw new Error('connection refused');
          return store.usage.insertMany(records);
        },
      },
    } as Store;
    const events: unknown[] = [];
    const options = { flushIntervalMs: 60_000, maxBatch: 2, onError: () => {}, onSpill: (e: unknown) => events.push(e) };
    const first = new UsageWriter(flaky, { ...options, spill: new UsageSpill(spillDir) });
    const before = Date.now();
    for (const [i, cost] of [0.25, 0.5, 1].entries()) first.record({ ...record(`req_spill_${i}`, cost), keyId: key.id });
    await first.flush();
    // Out of memory, onto disk: memory holds no backlog however long the outage lasts.
    expect(first.pending).toBe(0);
    expect(events).toEqual([{ spilled: 3 }]);
    expect(readdirSync(spillDir)).toHaveLength(1);
    // Not stored: the budget leases must not take these costs off yet.
    expect(first.storedBefore).toBeLessThanOrEqual(before + 1);
    await first.flush();
    expect(events).toHaveLength(1);
    // A new process on the same directory (the first one stopped) finds the segment and stores it once the database answers.
    const spill = new UsageSpill(spillDir);
    await spill.load();
    expect(spill.waiting).toBe(1);
    const second = new UsageWriter(flaky, { ...options, spill });
    expect(second.storedBefore).toBeLessThanOrEqual(before + 1);
    down = false;
    await second.flush();
    expect(events).toEqual([{ spilled: 3 }, { replayed: 3 }]);
    expect(readdirSync(spillDir)).toHaveLength(0);
    expect(second.storedBefore).toBeGreaterThanOrEqual(before);
    expect((await store.usage.list({ keyId: key.id })).map((r) => r.requestId).sort()).toEqual(['req_spill_0', 'req_spill_1', 'req_spill_2']);
    expect((await store.keys.getById(key.id))?.spent).toBe(1.75);
    // The same segment replayed again (a crash after its rows went in, before it was removed) adds nothing.
    const again = new UsageSpill(spillDir);
    await again.append([{ ...record('req_spill_1', 0.5), keyId: key.id }], Date.now());
    await new UsageWriter(store, { ...options, spill: again }).flush();
    expect((await store.usage.list({ keyId: key.id })).length).toBe(3);
    expect((await store.keys.getById(key.id))?.spent).toBe(1.75);
  });

  it("keeps storedBefore behind records on disk by this process's clock, when the database's clock they are stamped with is an hour ahead", async () => {
    const flaky: Store = {
      ...store,
      usage: {
        ...store.usage,
        insertMany: async () => {
          throw new Error('connection refused');
        },
      },
    } as Store;
    const writer = new UsageWriter(flaky, { flushIntervalMs: 60_000, maxBatch: 500, onError: () => {}, spill: new UsageSpill(join(dir, 'spill-skew')) });
    await writer.flush();
    const before = Date.now();
    await new Promise((r) => setTimeout(r, 2));
    // Stamped by a database clock an hour ahead of this process's: the budget ledgers time its cost by this process's.
    writer.record({ ...record('req_skew_1', 0.25), createdAt: new Date(Date.now() + 3_600_000) });
    await writer.flush();
    expect(writer.pending).toBe(0);
    // On disk, not in the database's spend: a cost settled after `before` must not count as stored.
    expect(writer.storedBefore).toBeLessThanOrEqual(before);
  });

  it('a spill directory that cannot be made (under /proc) fails the append, which hung for good and kept a libuv thread busy', async () => {
    const spill = new UsageSpill('/proc/gw-usage-spill/embedded');
    const outcome = await Promise.race([
      spill.append([record('req_nowhere', 0.1)], Date.now()).then(
        () => 'written',
        (err: NodeJS.ErrnoException) => err.code,
      ),
      new Promise((resolve) => setTimeout(() => resolve('still waiting'), 3_000)),
    ]);
    expect(outcome).toBe('ENOENT');
  });

  it('leaves to another running gateway the segments it is still writing, and takes those of one that has ended', async () => {
    const spillDir = join(dir, 'spill-shared');
    mkdirSync(spillDir, { recursive: true });
    const line = (id: string) => `${JSON.stringify({ ...record(id, 0.1), keyId: 'k_shared' })}\n`;
    // pid 1 is always running; 4194304 is above Linux's largest pid, so never running.
    writeFileSync(join(spillDir, `usage-${Date.now() - 2000}-1-0.ndjson`), line('req_live_writer'));
    writeFileSync(join(spillDir, `usage-${Date.now() - 1000}-4194304-0.ndjson`), line('req_ended_writer'));
    const spill = new UsageSpill(spillDir);
    await spill.load();
    expect(spill.waiting).toBe(2);
    const taken = await spill.takeOldest();
    expect(taken?.records.map((r) => r.requestId)).toEqual(['req_ended_writer']);
    await taken?.done();
    expect(await spill.takeOldest()).toBeNull();
    expect(readdirSync(spillDir)).toHaveLength(1);
  });
});

describe('the usage spill on a disk that takes part of a batch and then refuses (full, or past a file size limit)', () => {
  it('appends the refused batch again to a new segment, not after the part on disk, so that every record reads back', async () => {
    const spillDir = join(dir, 'spill-partial');
    const id = (i: number) => `req_partial_${String(i).padStart(2, '0')}`;
    const line = JSON.stringify({ ...record(id(0), 0.1), keyId: 'k_partial' }).length + 1;
    // A process whose files may not grow past 2 KiB (ulimit -f 4, in blocks of 512 bytes): the disk takes part of the batch that crosses it, then
    // fails the write (EFBIG), as a disk that fills up takes part of one and fails it (ENOSPC).
    const perFile = Math.floor(2048 / line);
    const script = `
      const { UsageSpill } = await import(${JSON.stringify(new URL('../dist/jobs/usage-spill.js', import.meta.url).pathname)});
      const spill = new UsageSpill(${JSON.stringify(spillDir)});
      const rec = (i) => ({ ...${JSON.stringify({ ...record('x', 0.1), keyId: 'k_partial' })}, requestId: 'req_partial_' + String(i).padStart(2, '0'), createdAt: new Date() });
      await spill.append(Array.from({ length: ${perFile} }, (_, i) => rec(i)));
      const crossing = [rec(${perFile}), rec(${perFile + 1})];
      const first = await spill.append(crossing).then(() => 'written', (e) => e.code);
      const again = await spill.append(crossing).then(() => 'written', (e) => e.code);
      console.log(JSON.stringify({ first, again }));
    `;
    const { stdout } = await execFileP('sh', ['-c', 'ulimit -f 4; exec "$0" --input-type=module -e "$1"', process.execPath, script]);
    expect(JSON.parse(stdout)).toEqual({ first: 'EFBIG', again: 'written' });
    const spill = new UsageSpill(spillDir);
    await spill.load();
    const ids: string[] = [];
    for (let taken = await spill.takeOldest(); taken; taken = await spill.takeOldest()) {
      ids.push(...taken.records.map((r) => r.requestId));
      await taken.done();
    }
    expect(ids.sort()).toEqual(Array.from({ length: perFile + 2 }, (_, i) => id(i)));
  });
});
