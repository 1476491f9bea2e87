import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { spawnGateway } from './helpers/process.js';

/** The remoteAddress of each request the gateway logged as incoming, in order. */
function loggedAddresses(output: string): string[] {
  return output
    .split('\n')
    .filter((l) => l.includes('"msg":"incoming request"') && l.includes('/healthz'))
    .map((l) => (JSON.parse(l) as { req: { remoteAddress: string } }).req.remoteAddress);
}

/** Two /healthz requests as a proxy on this host sends them (its client's address appended), and one without. */
async function addressesLogged(env: Record<string, string>): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-client-address-'));
  const gw = await spawnGateway({ GW_DATA_DIR: dir, ...env });
  try {
    // The client wrote an X-Forwarded-For of its own; the proxy appended the address it saw.
    await (await fetch(`${gw.url}/healthz`, { headers: { 'x-forwarded-for': '198.51.100.1, 203.0.113.7' } })).text();
    await (await fetch(`${gw.url}/healthz`)).text();
    const until = Date.now() + 5000;
    while (loggedAddresses(gw.output()).length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    return loggedAddresses(gw.output());
  } finally {
    gw.child.kill('SIGTERM');
    await gw.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the client address in the log behind a reverse proxy (GW_TRUST_PROXY)', () => {
  it('is the address the trusted proxy saw, not one the client wrote, with the proxies given by address or by count', async () => {
    expect(await addressesLogged({ GW_TRUST_PROXY: 'loopback' })).toEqual(['203.0.113.7', '127.0.0.1']);
    expect(await addressesLogged({ GW_TRUST_PROXY: '1' })).toEqual(['203.0.113.7', '127.0.0.1']);
  }, 60_000);

  it('is the connection peer unless set: an X-Forwarded-For from anyone is not taken', async () => {
    expect(await addressesLogged({})).toEqual(['127.0.0.1', '127.0.0.1']);
  }, 60_000);

  it('takes a hop count, addresses, CIDR ranges and the named ranges, and stops the start on anything else', () => {
    expect(loadConfig({ GW_TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(loadConfig({ GW_TRUST_PROXY: ' 10.0.0.0/8, fd00::/8,192.0.2.4, loopback ' }).trustProxy).toEqual([
      '10.0.0.0/8',
      'fd00::/8',
      '192.0.2.4',
      'loopback',
    ]);
    expect(loadConfig({}).trustProxy).toBeNull();
    for (const bad of ['true', '*', '0', '33', '10.0.0.0/33', 'fd00::/129', '10.0.0/8', 'proxy.internal', '10.0.0.1,', '10.0.0.0/8/8'])
      expect(() => loadConfig({ GW_TRUST_PROXY: bad }), bad).toThrow('GW_TRUST_PROXY');
  });
});
