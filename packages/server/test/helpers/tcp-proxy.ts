import { createServer, type Socket, connect as tcpConnect } from 'node:net';

export type TcpProxy = Awaited<ReturnType<typeof startTcpProxy>>;

/**
 * A TCP proxy to a local `port`, standing for the network between a gateway and its Redis or PostgreSQL: `cut()`
 * drops its connections and refuses new ones until `mend()`; `hold()` passes nothing on (a server that does not
 * answer) until `release()`; `slow(ms)` holds what clients send that long before passing it on, in order.
 */
export async function startTcpProxy(port: number) {
  const open = new Set<Socket>();
  let cut = false;
  let held = false;
  let delayMs = 0;
  const server = createServer((client) => {
    if (cut) return void client.destroy();
    const upstream = tcpConnect(port, '127.0.0.1');
    for (const [a, b, delayed] of [
      [client, upstream, true],
      [upstream, client, false],
    ] as const) {
      open.add(a);
      if (delayed) a.on('data', (chunk) => void setTimeout(() => b.destroyed || b.write(chunk), delayMs));
      else a.pipe(b);
      if (held) a.pause();
      a.on('error', () => b.destroy());
      a.on('close', () => {
        open.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    cut() {
      cut = true;
      for (const s of open) s.destroy();
    },
    mend() {
      cut = false;
    },
    hold() {
      held = true;
      for (const s of open) s.pause();
    },
    release() {
      held = false;
      for (const s of open) s.resume();
    },
    slow(ms: number) {
      delayMs = ms;
    },
    close() {
      for (const s of open) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
