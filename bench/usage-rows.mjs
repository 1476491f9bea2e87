// What a usage row costs the embedded database as its table grows, for the gateway's request ids and for wholly random
// ones: `npm run build && node bench/usage-rows.mjs [rows]` (default 300,000). Rows go in as the gateway writes them
// (COPY of 500-row chunks, CSV, into the migrated usage table, PGlite with the gateway's 4 MB of shared buffers).

import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { newRequestId } from '../packages/server/dist/lib/ids.js';
import { USAGE_COLUMNS } from '../packages/server/dist/store/usage-copy.js';

const ROOT = new URL('../', import.meta.url).pathname;
const total = Number(process.argv[2] ?? 300_000);
const CHUNK = 500;
const REPORT_EVERY = 50_000;

async function migratedDatabase(dir) {
  const db = await PGlite.create({ dataDir: dir, postgresqlconf: ['shared_buffers = 4MB'] });
  const folder = join(ROOT, 'packages/server/drizzle');
  for (const file of readdirSync(folder)
    .filter((f) => f.endsWith('.sql'))
    .sort()) {
    for (const statement of readFileSync(join(folder, file), 'utf8').split('--> statement-breakpoint')) await db.exec(statement);
  }
  return db;
}

/** µs of this process's CPU per row, for each block of REPORT_EVERY rows. */
async function run(name, id) {
  const dir = mkdtempSync(join(tmpdir(), 'usage-rows-'));
  const db = await migratedDatabase(dir);
  const perRow = [];
  let cpu0 = process.cpuUsage();
  try {
    for (let done = 0; done < total; done += CHUNK) {
      let csv = '';
      for (let i = 0; i < CHUNK; i++) {
        csv += `"${id()}","key_bench","ws_bench","chat","bench-model","bench",12,30,42,0,0.000012,3,200,,f,${new Date().toISOString()}\n`;
      }
      await db.exec(`COPY usage_records (${USAGE_COLUMNS}) FROM '/dev/blob' WITH (FORMAT csv)`, { blob: new Blob([csv]) });
      if ((done + CHUNK) % REPORT_EVERY === 0) {
        const used = process.cpuUsage(cpu0);
        perRow.push((used.user + used.system) / REPORT_EVERY);
        cpu0 = process.cpuUsage();
      }
    }
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`${name.padEnd(28)} ${perRow.map((us) => us.toFixed(0).padStart(5)).join(' ')}`);
}

console.log(`µs of CPU per usage row, per ${REPORT_EVERY.toLocaleString('en')} rows inserted (${total.toLocaleString('en')} in all)`);
await run("the gateway's request ids", newRequestId);
await run('wholly random ids', () => `req_${randomBytes(12).toString('hex')}`);
