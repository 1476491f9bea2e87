import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

// DESIGN.md's folder table: a folder may import only folders on lower rows.
const LAYERS = ['lib', 'errors', 'config', 'kv', 'store', 'providers', 'streaming', 'auth', 'limits', 'routing', 'jobs', 'http'] as const;
const SRC = new URL('../src/', import.meta.url).pathname;

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = join(dir, name);
    return statSync(full).isDirectory() ? filesUnder(full) : full.endsWith('.ts') ? [full] : [];
  });
}

function layerOf(file: string): string | null {
  const top = relative(SRC, file).split('/')[0] ?? '';
  return (LAYERS as readonly string[]).includes(top) ? top : null;
}

function importsOf(file: string, text: string): string[] {
  return [...text.matchAll(/(?:import|export)[^'"]*?from\s+['"](\.[^'"]+)['"]/g)].map((m) => join(file, '..', m[1] as string));
}

/** Every import edge between two server folders that DESIGN.md forbids. */
function forbiddenEdges(files: { file: string; text: string }[]): string[] {
  const bad: string[] = [];
  for (const { file, text } of files) {
    const from = layerOf(file);
    if (from === null) continue;
    for (const target of importsOf(file, text)) {
      const to = layerOf(target);
      if (to === null) {
        bad.push(`${relative(SRC, file)} imports ${relative(SRC, target)} (outside the layered folders)`);
      } else if (LAYERS.indexOf(to as (typeof LAYERS)[number]) > LAYERS.indexOf(from as (typeof LAYERS)[number])) {
        bad.push(`${relative(SRC, file)} (${from}) imports ${relative(SRC, target)} (${to})`);
      }
    }
  }
  return bad;
}

describe('server folder boundaries', () => {
  it('no folder imports a folder above it in DESIGN.md’s table', () => {
    expect(forbiddenEdges(filesUnder(SRC).map((file) => ({ file, text: readFileSync(file, 'utf8') })))).toEqual([]);
  });

  it('only http/ knows Fastify, and only config/ reads the environment', () => {
    const offenders = filesUnder(SRC).flatMap((file) => {
      const layer = layerOf(file);
      const text = readFileSync(file, 'utf8');
      const out: string[] = [];
      if (layer !== null && layer !== 'http' && /from ['"]fastify['"]|from ['"]@fastify\//.test(text)) out.push(`${relative(SRC, file)} imports fastify`);
      if (layer !== null && layer !== 'config' && /process\.env/.test(text)) out.push(`${relative(SRC, file)} reads process.env`);
      return out;
    });
    expect(offenders).toEqual([]);
  });

  it('drizzle is required as CommonJS (store/drizzle-cjs.ts), never imported at run time: the ESM loader costs ~150 MB to load it', () => {
    const runtimeImport = /^import\s+(?!type\b)[^;]*from\s+['"]drizzle-orm[^'"]*['"]/m;
    const offenders = filesUnder(SRC).filter((file) => runtimeImport.test(readFileSync(file, 'utf8')));
    expect(offenders.map((f) => relative(SRC, f))).toEqual([]);
    // The pattern can fail: a value import is caught, a type-only one is not.
    expect(runtimeImport.test("import { sql } from 'drizzle-orm';")).toBe(true);
    expect(runtimeImport.test("import type { SQL } from 'drizzle-orm';")).toBe(false);
  });

  it('a log line carries an error as its summary (lib/error-summary.ts), never the error object', () => {
    // pino writes an error object whole: a Redis reply error's command arguments (a stored answer), a query's parameters.
    const rawError = /\blog\.(?:fatal|error|warn|info|debug|trace)\(\s*\{[^}]*\berr(?:\s*[,}]|\s*:(?!\s*errorSummary\())/;
    const offenders = filesUnder(SRC).filter((file) => rawError.test(readFileSync(file, 'utf8')));
    expect(offenders.map((f) => relative(SRC, f))).toEqual([]);
    expect(rawError.test("request.log.warn({ err }, 'x')")).toBe(true);
    expect(rawError.test("app.log.error({ err: (err as Error).message }, 'x')")).toBe(true);
    expect(rawError.test("request.log.warn({ provider, err }, 'x')")).toBe(true);
    expect(rawError.test("request.log.warn({ err: errorSummary(err) }, 'x')")).toBe(false);
  });

  it('catches a forbidden edge when one exists', () => {
    // The checker itself must be able to fail: a lib file importing http is flagged, the reverse is not.
    const up = { file: join(SRC, 'lib', 'probe.ts'), text: "import { x } from '../http/errors.js';" };
    const down = { file: join(SRC, 'http', 'probe.ts'), text: "import { x } from '../lib/ids.js';" };
    expect(forbiddenEdges([up])).toHaveLength(1);
    expect(forbiddenEdges([down])).toEqual([]);
  });
});
