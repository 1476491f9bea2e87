// The fake upstream as its own process: `node bench/upstream/server.mjs [port]`.
// Prints `upstream listening on <port>`; exits when its parent closes stdin.
import { createFakeOpenAI } from './fake-openai.mjs';

const server = createFakeOpenAI();
server.maxConnections = 10_000;
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  process.stdout.write(`upstream listening on ${server.address().port}\n`);
});
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
