import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PostgresServer, startPostgres } from '@gw/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runGatewayToExit } from './helpers/process.js';

let pg: PostgresServer;
let dir: string;

beforeAll(async () => {
  pg = await startPostgres();
  dir = mkdtempSync(join(tmpdir(), 'gw-role-rights-'));
}, 60_000);

afterAll(async () => {
  await pg?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('DATABASE_URL naming a role that may not create in its database', () => {
  it("stops the start naming PostgreSQL's reason and the right the role needs, not only the statement that failed", async () => {
    const url = new URL(await pg.createDatabase());
    const database = url.pathname.slice(1);
    await pg.psql(`CREATE ROLE reader LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC; REVOKE CREATE ON DATABASE ${database} FROM PUBLIC`, database);
    url.username = 'reader';
    const { code, output } = await runGatewayToExit({ DATABASE_URL: url.toString(), GW_DATA_DIR: join(dir, 'data') });
    expect(code).toBe(1);
    expect(output).toContain(`permission denied for database ${database}`);
    expect(output).toContain('The role in DATABASE_URL needs the right to create in that database');
    // The statement is named by its first words, not dumped with its parameters.
    expect(output).not.toContain('params:');
  }, 60_000);
});
