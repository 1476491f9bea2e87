import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

/**
 * A provider host of a test's own, on a free loopback port: each request's body is read whole, then handed to
 * `answer` with it. `baseUrl` is its `/v1` base, as a provider entry of type `openai` takes it.
 */
export async function startRawUpstream(
  answer: (req: IncomingMessage, res: ServerResponse, body: string) => void,
): Promise<{ server: Server; baseUrl: string }> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => answer(req, res, body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, baseUrl: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1` };
}

/** The model list an OpenAI-compatible host answers at GET /models. */
export function answerModelList(res: ServerResponse, ids: readonly string[]): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ object: 'list', data: ids.map((id) => ({ id, object: 'model' })) }));
}
