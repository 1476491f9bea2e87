import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GatewayFileConfig } from '@gw/schema';
import { type Simulator, startSimulator } from '@gw/simulator';
import { createGateway, type Gateway, type GatewayOptions } from '../../src/app.js';
import { loadConfig } from '../../src/config/index.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestGateway {
  url: string;
  baseA: string;
  baseB: string;
  gateway: Gateway;
  sim: Simulator;
  admin<T = unknown>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  createKey(body?: Record<string, unknown>): Promise<{ id: string; key: string; workspaceId: string | null }>;
  close(): Promise<void>;
}

export interface StartOptions {
  databaseUrl?: string;
  redisUrl?: string;
  sim?: Simulator;
  /** Added to the environment the config is read from; `undefined` unsets a variable (GW_ADMIN_TOKEN). */
  env?: Record<string, string | undefined>;
  /** Adjusts the demo catalogue before the gateway starts (e.g. a short provider timeout). */
  catalogue?: (c: GatewayFileConfig) => GatewayFileConfig;
  idleMemoryRelease?: GatewayOptions['idleMemoryRelease'];
  leaseSweepMs?: number;
  budgetIdleMs?: number;
}

/** A real gateway on a free loopback port, over the simulator's demo catalogue. */
export async function startGateway(options: StartOptions = {}): Promise<TestGateway> {
  const sim = options.sim ?? (await startSimulator({ latencyScale: 0 }));
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-test-'));
  const config = loadConfig({
    GW_DATA_DIR: dataDir,
    GW_ADMIN_TOKEN: ADMIN_TOKEN,
    ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
    ...(options.redisUrl ? { REDIS_URL: options.redisUrl } : {}),
    ...options.env,
  });
  const catalogue = options.catalogue ? options.catalogue(structuredClone(sim.demoConfig())) : sim.demoConfig();
  const gateway = await createGateway({
    config,
    catalogue,
    logger: false,
    idleMemoryRelease: options.idleMemoryRelease,
    leaseSweepMs: options.leaseSweepMs,
    budgetIdleMs: options.budgetIdleMs,
  });
  await gateway.app.listen({ host: '127.0.0.1', port: 0 });
  const port = (gateway.app.server.address() as { port: number }).port;
  const url = `http://127.0.0.1:${port}`;
  const admin = async <T>(method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
  return {
    url,
    baseA: `${url}/v1`,
    baseB: `${url}/alt/v1`,
    gateway,
    sim,
    admin,
    async createKey(body = {}) {
      const res = await admin<{ id: string; key: string; workspaceId: string | null }>('POST', '/keys', body);
      if (res.status !== 201) throw new Error(`createKey: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body;
    },
    async close() {
      await gateway.close();
      if (!options.sim) await sim.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Polls until `check` passes or the time is up. */
export async function eventually(check: () => Promise<void> | void, timeoutMs = 3000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      await check();
      return;
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/** Every simulated provider back to normal: no faults, counters at zero. */
export function resetProviders(sim: Simulator): void {
  for (const p of Object.values(sim.providers)) {
    p.clearFaults();
    p.resetStats();
  }
}
