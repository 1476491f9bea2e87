/**
 * Run the simulated providers on their own: `node packages/simulator/dist/main.js [--port 9100]
 * [--host 127.0.0.1] [--latency-scale 1] [--config gw.json]`. Prints the demo gateway config (JSON) to
 * stdout, or writes it to --config; stops on SIGINT/SIGTERM.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startSimulator } from './index.js';

const USAGE = `usage: node packages/simulator/dist/main.js [--port 9100] [--host 127.0.0.1] [--latency-scale 1] [--config gw.json]
  --port           the first provider's port (the others follow); 0: any free ports
  --host           the address to listen on
  --latency-scale  1: the providers' real timings, 0: none
  --config         write the gateway config for the simulated providers to this file (else it goes to stdout)
`;

function args() {
  try {
    return parseArgs({
      options: {
        port: { type: 'string', default: '0' },
        host: { type: 'string', default: '127.0.0.1' },
        'latency-scale': { type: 'string', default: '1' },
        config: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}`);
    process.exit(2);
  }
}

const values = args();
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

/** A flag's number, or exit 2 naming the flag (`Number('abc')` would run the providers on NaN). */
function numberOf(flag: string, text: string, ok: (n: number) => boolean, expected: string): number {
  const n = /^\s*\d+(\.\d+)?\s*$/.test(text) ? Number(text) : Number.NaN;
  if (ok(n)) return n;
  process.stderr.write(`--${flag} ${JSON.stringify(text)}: expected ${expected}\n${USAGE}`);
  process.exit(2);
}

const basePort = numberOf(
  'port',
  values.port,
  (n) => Number.isInteger(n) && n <= 65535 - 5,
  'a port number, 0 to 65530 (the six providers take it and the five after it)',
);
const latencyScale = numberOf('latency-scale', values['latency-scale'], Number.isFinite, 'a number >= 0');
let sim: Awaited<ReturnType<typeof startSimulator>>;
try {
  sim = await startSimulator({ host: values.host, basePort, latencyScale });
} catch (err) {
  // A port already taken (9100 is also node_exporter's) or a host that is not this machine's: say which, without a stack.
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number };
  const where = e.port === undefined ? values.host : `${e.address ?? values.host}:${e.port}`;
  process.stderr.write(`cannot listen on ${where}: ${e.message}\n`);
  process.exit(1);
}
const config = JSON.stringify(sim.demoConfig(), null, 2);
if (values.config) {
  writeFileSync(values.config, `${config}\n`);
  for (const p of Object.values(sim.providers)) process.stderr.write(`${p.id.padEnd(9)} ${p.baseUrl}\n`);
} else process.stdout.write(`${config}\n`);

const stop = (): void => {
  sim.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
