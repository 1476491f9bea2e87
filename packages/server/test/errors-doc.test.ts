import { readFileSync } from 'node:fs';
import { CANONICAL_ERRORS, type CanonicalCode } from '@gw/schema';
import { describe, expect, it } from 'vitest';

const doc = readFileSync(new URL('../../../docs/errors.md', import.meta.url), 'utf8');

describe('docs/errors.md', () => {
  it('has one row per canonical error with its A and B status and code', () => {
    const rows = new Map(
      doc
        .split('\n')
        .filter((l) => /^\| [a-z_]+ \| \d{3} \|/.test(l))
        .map((l) => {
          const cells = l.split('|').map((c) => c.trim());
          return [cells[1], cells.slice(2, 6)] as const;
        }),
    );
    for (const [code, e] of Object.entries(CANONICAL_ERRORS) as [CanonicalCode, (typeof CANONICAL_ERRORS)[CanonicalCode]][]) {
      expect(rows.get(code), code).toEqual([String(e.a[0]), e.a[1], String(e.b[0]), e.b[1]]);
    }
    expect(rows.size).toBe(Object.keys(CANONICAL_ERRORS).length);
  });
});
