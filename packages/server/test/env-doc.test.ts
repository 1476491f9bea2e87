import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ENVIRONMENT_VARIABLES, loadConfig } from '../src/config/index.js';

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
const source = readFileSync(new URL('../src/config/index.ts', import.meta.url), 'utf8');

/** Every numeric variable as the config reads it: `int(env, 'NAME', default, min, max)`, its numbers written as products. */
const numeric = [...source.matchAll(/\bint\(env, '(\w+)', ([\d_ *]+), ([\d_ *]+), ([\d_ *]+)\)/g)].map(([, name, ...numbers]) => {
  const [fallback, min, max] = numbers.map((n) => (n as string).split('*').reduce((product, factor) => product * Number(factor.trim().replaceAll('_', '')), 1));
  return { name: name as string, fallback: fallback as number, min: min as number, max: max as number };
});

/** The README's environment table, by variable: its default cell and its meaning cell. */
const rows = new Map(
  readme
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .flatMap((l) => {
      const [, names, fallback, meaning] = l.split('|').map((c) => c.trim());
      return [...(names ?? '').matchAll(/`(\w+)`/g)].map(([, name]) => [name as string, { fallback: fallback ?? '', meaning: meaning ?? '' }] as const);
    }),
);

describe("README's environment table", () => {
  it('finds every numeric variable the config reads', () => {
    expect(numeric.length).toBe(source.match(/\bint\(env, /g)?.length);
    expect(numeric.length).toBeGreaterThan(15);
  });

  it.each(numeric)('states the default and the range the config enforces for $name', ({ name, fallback, min, max }) => {
    const row = rows.get(name);
    expect(row, name).toBeDefined();
    expect(row?.fallback.startsWith(`\`${fallback}\``), `${name} default ${fallback}: ${row?.fallback}`).toBe(true);
    expect(row?.meaning, name).toContain(`${min} to ${max}`);
    // The range read from the source is the one enforced.
    expect(() => loadConfig({ [name]: String(max) })).not.toThrow();
    expect(() => loadConfig({ [name]: String(max + 1) })).toThrow(name);
    if (min > 0) expect(() => loadConfig({ [name]: String(min - 1) })).toThrow(name);
  });
});

describe('the variables the config reads', () => {
  // The list a misspelt GW_* variable is told apart from (and matched against) at start.
  it('are the ones the config reads and the README table lists', () => {
    const read = new Set([...source.matchAll(/\b(?:int|str|url|writableDir)\(env, '(\w+)'|env\['(\w+)'\]/g)].map(([, a, b]) => (a ?? b) as string));
    expect([...read].sort()).toEqual([...ENVIRONMENT_VARIABLES].sort());
    const table = [...rows.keys()].filter((name) => /^[A-Z][A-Z0-9_]+$/.test(name));
    expect(table.sort()).toEqual([...ENVIRONMENT_VARIABLES].sort());
  });
});
