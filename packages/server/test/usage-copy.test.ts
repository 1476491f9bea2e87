import { describe, expect, it } from 'vitest';
import type { UsageRecord } from '../src/store/types.js';
import { picoText, ROWS_PER_TURN, spendOf, storedPico, USAGE_COLUMNS, usageCopyScript, usageCsvLine } from '../src/store/usage-copy.js';

const record = (overrides: Partial<UsageRecord>): UsageRecord => ({
  requestId: 'req_1',
  keyId: 'key_1',
  workspaceId: null,
  kind: 'chat',
  model: 'm',
  provider: null,
  promptTokens: 1,
  completionTokens: 2,
  totalTokens: 3,
  units: 0,
  cost: 0.5,
  latencyMs: 7,
  status: 200,
  errorCode: null,
  streamed: false,
  createdAt: new Date('2026-01-02T03:04:05.678Z'),
  ...overrides,
});

describe('usage rows for COPY', () => {
  it('rounds a cost to 12 decimals half away from zero, from the text the other path sends', () => {
    expect(storedPico(0)).toBe(0n);
    expect(storedPico(1)).toBe(1_000_000_000_000n);
    expect(storedPico(0.0000002)).toBe(200_000n); // String() gives '2e-7'
    expect(storedPico(1.23e-7)).toBe(123_000n);
    expect(storedPico(5e-13)).toBe(1n);
    expect(storedPico(4.9e-13)).toBe(0n);
    expect(storedPico(1.0000000000005)).toBe(1_000_000_000_001n);
    expect(storedPico(-5e-13)).toBe(-1n);
    expect(storedPico(123456789012.5)).toBe(123_456_789_012_500_000_000_000n);
    expect(() => storedPico(Number.NaN)).toThrow(RangeError);
    expect(() => storedPico(Number.POSITIVE_INFINITY)).toThrow(RangeError);
  });

  it('writes sums as numeric text', () => {
    expect(picoText(0n)).toBe('0.000000000000');
    expect(picoText(1_000_000_000_003n)).toBe('1.000000000003');
    expect(picoText(-1n)).toBe('-0.000000000001');
  });

  it('sums the cost per key and per workspace, leaving out rows that cost nothing', () => {
    const spend = spendOf([
      record({ keyId: 'b', workspaceId: 'w', cost: 0.1 }),
      record({ keyId: 'a', workspaceId: 'w', cost: 0.2 }),
      record({ keyId: 'b', workspaceId: null, cost: 0.1 }),
      record({ keyId: 'c', workspaceId: 'v', cost: 0 }),
    ]);
    expect(spend.keys).toEqual([
      ['a', '0.200000000000'],
      ['b', '0.200000000000'],
    ]);
    expect(spend.workspaces).toEqual([['w', '0.300000000000']]);
  });

  it('writes one script: the COPY, then the spend of each key and workspace, ids quoted as literals', async () => {
    const script = await usageCopyScript([record({ keyId: "k'1", workspaceId: 'w', cost: 0.25 }), record({ keyId: 'k2', cost: 0 })]);
    expect(script.sql.split(';\n')).toEqual([
      `COPY usage_records (${USAGE_COLUMNS}) FROM '/dev/blob' WITH (FORMAT csv)`,
      "UPDATE api_keys SET spent = api_keys.spent + s.total FROM (VALUES ('k''1', '0.250000000000'::numeric)) AS s(id, total) WHERE api_keys.id = s.id",
      "UPDATE workspaces SET spent = workspaces.spent + s.total FROM (VALUES ('w', '0.250000000000'::numeric)) AS s(id, total) WHERE workspaces.id = s.id",
    ]);
    expect(script.csv.split('\n')).toHaveLength(3);
    expect((await usageCopyScript([record({ cost: 0 })])).sql).not.toContain('UPDATE');
    await expect(usageCopyScript([record({ cost: 0.1 }), record({ cost: Number.NaN })])).rejects.toThrow(RangeError);
  });

  it('quotes text, doubles quotes and writes NULL as an empty unquoted field', () => {
    expect(usageCsvLine(record({ model: 'say "hi", twice', workspaceId: 'ws', errorCode: '' }))).toBe(
      '"req_1","key_1","ws","chat","say ""hi"", twice",,1,2,3,0,0.5,7,200,"",f,2026-01-02T03:04:05.678Z\n',
    );
  });

  it('builds a large chunk a slice at a time, letting the event loop run between slices', async () => {
    const rows = Array.from({ length: ROWS_PER_TURN * 4 + 1 }, (_, i) => record({ requestId: `req_${i}`, keyId: `key_${i % 3}`, cost: 0.001 }));
    // Counts the turns of the event loop that pass while the chunk is built.
    let turns = 0;
    let building = true;
    const count = () => {
      turns++;
      if (building) setImmediate(count);
    };
    setImmediate(count);
    const script = await usageCopyScript(rows);
    building = false;
    // Other callbacks ran while the chunk was built: one between each two slices at least.
    expect(turns).toBeGreaterThanOrEqual(4);
    expect(
      script.csv
        .split('\n')
        .filter(Boolean)
        .map((line) => line.split(',')[0]),
    ).toEqual(rows.map((r) => `"${r.requestId}"`));
    expect(script.sql).toContain("('key_0', '0.067000000000'::numeric), ('key_1', '0.067000000000'::numeric), ('key_2', '0.067000000000'::numeric)");
  });
});
