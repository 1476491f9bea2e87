// The embedded database's template: a freshly initialised PGlite cluster, dumped once at build time, from which a
// gateway's first start in an empty GW_DATA_DIR creates its database (store/pglite-thread.ts).
// PGlite's own initdb, run at that first start instead, took the process to 1.0-1.2 GB resident for a moment and
// 11-17 s on this machine; creating the cluster from the template peaks at about 235 MB and takes about 2 s.
// Skipped when the template of the installed PGlite version is there already. Run by `npm run build`.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(new URL('../packages/server/package.json', import.meta.url));
const entry = require.resolve('@electric-sql/pglite');
const version = JSON.parse(readFileSync(join(dirname(entry), '..', 'package.json'), 'utf8')).version;
const out = new URL('../packages/server/dist/', import.meta.url).pathname;
const tarball = join(out, 'pglite-template.tar.gz');
const stamp = join(out, 'pglite-template.json');

const current = existsSync(tarball) && existsSync(stamp) && JSON.parse(readFileSync(stamp, 'utf8')).pglite === version;
if (!current) {
  const started = performance.now();
  const { PGlite } = require('@electric-sql/pglite');
  const db = await PGlite.create({ dataDir: 'memory://' });
  const dump = await db.dumpDataDir('gzip');
  await db.close();
  mkdirSync(out, { recursive: true });
  // Written under another name first: a build stopped half-way leaves no torn template behind.
  writeFileSync(`${tarball}.tmp`, Buffer.from(await dump.arrayBuffer()));
  renameSync(`${tarball}.tmp`, tarball);
  writeFileSync(stamp, `${JSON.stringify({ pglite: version })}\n`);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stdout.write(`embedded database template for PGlite ${version}: ${(dump.size / 1e6).toFixed(1)} MB in ${seconds} s\n`);
}
