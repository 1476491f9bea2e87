import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Simulator, startSimulator } from '@gw/simulator';
import { type PostgresServer, type RedisServer, startPostgres, startRedis } from '@gw/testkit';
import { ADMIN_TOKEN, startGateway, type TestGateway } from './gateway.js';
import { type GatewayProcess, spawnGateway } from './process.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

/**
 * Two gateways sharing PostgreSQL and a Redis reached through a TCP proxy that can delay, hold or cut it: `one` a
 * process of its own (its log is read from its output), `two` in this one (its services are read directly).
 */
export interface RedisBehindProxy {
  pg: PostgresServer;
  proxy: TcpProxy;
  sim: Simulator;
  one: GatewayProcess;
  two: TestGateway;
  /** The PostgreSQL database both use, by name. */
  database: string;
  close(): Promise<void>;
}

export async function startRedisBehindProxy(dirPrefix: string): Promise<RedisBehindProxy> {
  let redis: RedisServer | undefined;
  let pg: PostgresServer | undefined;
  let sim: Simulator | undefined;
  let proxy: TcpProxy | undefined;
  let one: GatewayProcess | undefined;
  let two: TestGateway | undefined;
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  const close = async () => {
    if (one && one.child.exitCode === null) {
      one.child.kill('SIGTERM');
      await one.exited;
    }
    await two?.close();
    await proxy?.close();
    await Promise.all([sim?.close(), redis?.stop(), pg?.stop()]);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    [redis, pg, sim] = await Promise.all([startRedis(), startPostgres(), startSimulator({ latencyScale: 0 })]);
    proxy = await startTcpProxy(Number(new URL(redis.url).port));
    const databaseUrl = await pg.createDatabase();
    const redisUrl = `redis://127.0.0.1:${proxy.port}`;
    writeFileSync(join(dir, 'gw.json'), JSON.stringify(sim.demoConfig()));
    one = await spawnGateway({
      GW_CONFIG: join(dir, 'gw.json'),
      GW_DATA_DIR: join(dir, 'data'),
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      GW_ADMIN_TOKEN: ADMIN_TOKEN,
    });
    two = await startGateway({ sim, databaseUrl, redisUrl });
    return { pg, proxy, sim, one, two, database: new URL(databaseUrl).pathname.slice(1), close };
  } catch (err) {
    await close();
    throw err;
  }
}
