import { createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { UpstreamHttp } from '../src/providers/http-client.js';

const closers: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** The client objects undici's pool keeps, one per connection it had open at once (read from its own symbol). */
function poolClients(http: UpstreamHttp): number {
  const pool = (http as unknown as { pool: object }).pool;
  const kClients = Object.getOwnPropertySymbols(pool).find((s) => s.description === 'clients');
  return ((pool as Record<symbol, unknown[]>)[kClients as symbol] ?? []).length;
}

describe('upstream connection pool after a burst', () => {
  it('lets go of the client objects a burst of calls left once the pool is idle', async () => {
    // Slow to answer, so that the calls overlap (one connection each), and closing each connection after its answer.
    const server = createServer((_req, res) => {
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json', connection: 'close' }).end('{}'), 150);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    closers.push(() => void server.close());
    const http = new UpstreamHttp('burst', `http://127.0.0.1:${(server.address() as { port: number }).port}`, 5_000, undefined, undefined, 100);
    closers.push(() => http.close());

    const answers = await Promise.all(
      Array.from({ length: 40 }, () => http.json({ method: 'POST', path: '/v1/x', headers: { 'content-type': 'application/json' }, body: '{}' })),
    );
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(poolClients(http)).toBeGreaterThanOrEqual(40);

    // Every connection is closed and no call runs: the next check replaces the pool, its 40 clients with it.
    const until = Date.now() + 3_000;
    while (poolClients(http) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect(poolClients(http)).toBe(0);

    // The fresh pool serves calls as before.
    expect((await http.json({ method: 'POST', path: '/v1/x', headers: {}, body: '{}' })).status).toBe(200);
  });
});
