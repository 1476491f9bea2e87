import { createServer } from 'node:net';

/**
 * Binds HOST:PORT once and lets it go, so that a port already taken or a HOST that is not an address of this machine
 * stops the start at once rather than after the store has opened (seconds on the embedded store). The socket is not
 * kept for the gateway: a listener held while the store opens would take connections in and leave them waiting,
 * where a closed port refuses them. Another process may take the port in between; the listen after the store's
 * opening still reports that.
 */
export function probeListen(host: string, port: number): Promise<void> {
  const probe = createServer();
  return new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen({ host, port }, () => probe.close(() => resolve()));
  });
}
