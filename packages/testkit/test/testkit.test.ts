import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, type PostgresServer, pingRedis, type RedisServer, requireBinary, startPostgres, startRedis } from '../src/index.js';
import { descendants, processState } from '../src/process.js';

const redisOk = requireBinary('redis', 'packages/testkit');
const postgresOk = requireBinary('postgres', 'packages/testkit');

/** Sends one inline command over a raw socket and returns the first reply line. */
function redisCommand(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' }, () => socket.write(`${command}\r\n`));
    let buffer = '';
    socket.on('data', (chunk) => {
      buffer += chunk.toString();
      const end = buffer.indexOf('\r\n');
      if (end >= 0) {
        socket.destroy();
        resolve(buffer.slice(0, end));
      }
    });
    socket.on('error', reject);
  });
}

/**
 * Waits until a pid and all its live descendants are stopped (SIGSTOP lands
 * asynchronously; a backend that exited just before stays a zombie, 'Z',
 * since its stopped parent cannot reap it).
 */
async function expectTreeStopped(pid: number): Promise<void> {
  const states = () => [pid, ...descendants(pid)].map(processState).filter((s) => s !== 'Z' && s !== null);
  for (let i = 0; i < 100 && !states().every((s) => s === 'T'); i++) await new Promise((r) => setTimeout(r, 10));
  const final = states();
  expect(final.length).toBeGreaterThan(3);
  expect(new Set(final)).toEqual(new Set(['T']));
}

const pidAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('freePort', () => {
  it('returns a bindable loopback port', async () => {
    const port = await freePort();
    expect(port).toBeGreaterThan(0);
    expect(port).toBeLessThan(65536);
  });
});

describe.skipIf(!redisOk)('startRedis', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('answers PING and stores values', async () => {
    expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);
    expect(await pingRedis(redis.port)).toBe(true);
    expect(await redisCommand(redis.port, 'SET k v')).toBe('+OK');
    expect(await redisCommand(redis.port, 'GET k')).toBe('$1');
  });

  it('pause() stops answering and resume() answers again', async () => {
    redis.pause();
    expect(await pingRedis(redis.port, '127.0.0.1', 300)).toBe(false);
    redis.resume();
    expect(await pingRedis(redis.port)).toBe(true);
  });

  it('restart() keeps the port and forgets the data', async () => {
    const before = redis.pid;
    await redis.restart();
    expect(redis.pid).not.toBe(before);
    expect(await pingRedis(redis.port)).toBe(true);
    expect(await redisCommand(redis.port, 'GET k')).toBe('$-1');
  });

  it('restart() also works after kill()', async () => {
    await redis.kill();
    expect(await pingRedis(redis.port, '127.0.0.1', 300)).toBe(false);
    await redis.restart();
    expect(await pingRedis(redis.port)).toBe(true);
  });

  it('stop() ends the process, is idempotent, and works while paused', async () => {
    const other = await startRedis();
    const pid = other.pid;
    other.pause();
    await other.stop();
    await other.stop();
    expect(pidAlive(pid)).toBe(false);
    expect(await pingRedis(other.port, '127.0.0.1', 300)).toBe(false);
  });
});

describe.skipIf(!postgresOk)('startPostgres', () => {
  let pg: PostgresServer;
  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(async () => {
    await pg?.stop();
  });

  it('answers queries', async () => {
    expect(pg.url).toBe(`postgres://postgres@127.0.0.1:${pg.port}/postgres`);
    expect((await pg.psql('select 1 + 1')).trim()).toBe('2');
    expect((await pg.psql('show fsync')).trim()).toBe('off');
  });

  it('createDatabase() returns fresh, distinct databases', async () => {
    const a = await pg.createDatabase();
    const b = await pg.createDatabase();
    expect(a).not.toBe(b);
    const nameA = new URL(a).pathname.slice(1);
    await pg.psql('create table t (x int); insert into t values (42)', nameA);
    expect((await pg.psql('select x from t', nameA)).trim()).toBe('42');
    const named = await pg.createDatabase('suite_named');
    expect(named).toBe(`postgres://postgres@127.0.0.1:${pg.port}/suite_named`);
    await expect(pg.createDatabase('Bad; drop')).rejects.toThrow(/invalid name/);
  });

  it('pause() stops answering and resume() answers again', async () => {
    pg.pause();
    try {
      // Backends live in sessions of their own: every one must be stopped too.
      await expectTreeStopped(pg.pid);
      expect(await pg.isReady(2)).toBe(false);
    } finally {
      pg.resume();
    }
    expect(await pg.isReady()).toBe(true);
    expect((await pg.psql('select 1')).trim()).toBe('1');
  });

  it('restart() keeps the port and forgets every database', async () => {
    await pg.createDatabase('gone_after_restart');
    const before = pg.pid;
    await pg.restart();
    expect(pg.pid).not.toBe(before);
    const names = await pg.psql("select datname from pg_database where datname = 'gone_after_restart'");
    expect(names.trim()).toBe('');
  });

  it('kill() takes down the postmaster and every backend; restart() recovers', async () => {
    const tree = [pg.pid, ...descendants(pg.pid)];
    expect(tree.length).toBeGreaterThan(3);
    await pg.kill();
    await new Promise((r) => setTimeout(r, 100));
    for (const pid of tree) expect([null, 'Z']).toContain(processState(pid));
    expect(await pg.isReady(2)).toBe(false);
    await pg.restart();
    expect((await pg.psql('select 1')).trim()).toBe('1');
  });

  it('stop() ends every process and removes the directory', async () => {
    const other = await startPostgres();
    const pid = other.pid;
    const dataDir = (await other.psql('show data_directory')).trim();
    other.pause();
    await other.stop();
    await other.stop();
    expect(pidAlive(pid)).toBe(false);
    expect(existsSync(dataDir)).toBe(false);
  });
});
