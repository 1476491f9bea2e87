import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, worst } from './helpers/budget-chat.js';
import { eventually, startGateway, type TestGateway } from './helpers/gateway.js';

let gw: TestGateway;

// The embedded store's one instance: its budget totals are in its own memory.
beforeAll(async () => {
  gw = await startGateway({ budgetIdleMs: 200 });
}, 30_000);

afterAll(() => gw?.close());

const inMemory = (id: string) => gw.gateway.services.ledger.peek(`key:${id}`, `key:${id}`);
const spentOf = async (id: string) => ((await gw.admin<{ spent: number }>('GET', `/keys/${id}`)).body as { spent: number }).spent;

describe('budget totals of keys not used for a while (embedded store)', () => {
  it('leave memory once their costs are stored, and a key used again sees its true spend: it spends on to its end, never past it', async () => {
    const { id, key } = await gw.createKey({ budget: worst * 6 });
    for (let i = 0; i < 2; i++) expect((await chat(gw, key)).status).toBe(200);
    const before = (await inMemory(id))?.spent;
    expect(before).toBeGreaterThan(0);
    await eventually(async () => expect(await inMemory(id)).toBeNull(), 5_000);
    // Read again from the store, as spent: nothing lost, nothing counted twice.
    expect(await spentOf(id)).toBeCloseTo(before as number, 12);
    let admitted = 0;
    for (let status = 200; status === 200; admitted++) status = (await chat(gw, key)).status;
    expect((await inMemory(id))?.spent).toBeCloseTo(await gw.gateway.services.usage.flush().then(() => spentOf(id)), 12);
    expect(await spentOf(id)).toBeLessThanOrEqual(worst * 6 + 1e-12);
    // Each request costs less than its worst case: at least the four the budget held after the first two.
    expect(admitted - 1).toBeGreaterThanOrEqual(4);
    // Used up and dropped from memory, it is still refused, from the store's total.
    await eventually(async () => expect(await inMemory(id)).toBeNull(), 5_000);
    expect((await chat(gw, key)).status).toBe(402);
  }, 30_000);

  it("a revoked key's total goes too", async () => {
    const { id, key } = await gw.createKey({ budget: 1 });
    expect((await chat(gw, key)).status).toBe(200);
    expect(await inMemory(id)).not.toBeNull();
    expect((await gw.admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
    await eventually(async () => expect(await inMemory(id)).toBeNull(), 5_000);
  }, 30_000);
});
