import { createConnection, createServer, type Server, type Socket } from 'node:net';

/** A TCP hop in front of PostgreSQL that can be cut (connections reset, new ones refused) and opened again on its port. */
export class Link {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  constructor(
    readonly port: number,
    private readonly target: number,
  ) {}
  async open(): Promise<void> {
    const server = createServer((client) => {
      const db = createConnection({ host: '127.0.0.1', port: this.target });
      for (const s of [client, db]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(db).pipe(client);
      client.on('close', () => db.destroy());
      db.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.server = server;
  }
  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise((r) => server.close(r));
  }
}
