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

const sim = await startSimulator({ host: values.host, basePort: Number(values.port), latencyScale: Number(values['latency-scale']) });
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
