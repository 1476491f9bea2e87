import type { Simulator } from '@gw/simulator';
import { createGateway, type Gateway } from './app.js';
import { ensureFirstKey } from './auth/first-key.js';
import { ConfigError, type GatewayConfig, loadConfig } from './config/index.js';
import { errorSummary } from './lib/error-summary.js';
import { probeListen } from './lib/listen-probe.js';

/** Kept from the drain's bound for the process's own exit after the log's last flush (its threads and handles end). */
const EXIT_MARGIN_MS = 500;

/** The gateway's start (main.ts checks the Node version first): config, demo simulators when no config file, listen, graceful shutdown. */
async function main(signals: EarlySignals): Promise<void> {
  let config: GatewayConfig;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`gw: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  await probeListen(config.host, config.port).catch(cannotListen(config));
  let simulator: Simulator | null = null;
  let gateway: Gateway | null = null;
  // Set from the start: a signal before its handler killed the process at once, without a word, maybe mid-way through
  // creating the embedded database. One during the start stops it once the store is open, and the gateway never serves.
  let stopping: string | null = null;
  let stopBy = 0;
  let serving = false;
  // The log lines still buffered are written first, a stdout whose reader stalls waited for only until the drain's bound.
  const exit = (code: number) => {
    gateway?.logOutput?.flushWithin(Math.max(0, stopBy - EXIT_MARGIN_MS - Date.now()));
    process.exit(code);
  };
  const stop = (signal: string) => {
    // A second signal (an impatient Ctrl-C, a supervisor repeating itself) does not cut the stop short.
    if (stopping !== null) {
      if (gateway) gateway.app.log.warn({ signal }, 'already draining; the signal is ignored');
      else console.error(`gw: ${signal}: already stopping; the signal is ignored`);
      return;
    }
    stopping = signal;
    stopBy = Date.now() + config.shutdownTimeoutMs;
    const force = setTimeout(() => {
      if (gateway) gateway.app.log.error({ unwrittenUsageRecords: gateway.services.usage.pending }, 'shutdown timed out; exiting');
      else console.error(`gw: the start did not end within GW_SHUTDOWN_TIMEOUT_MS (${config.shutdownTimeoutMs} ms) of ${signal}; exiting`);
      exit(1);
    }, config.shutdownTimeoutMs);
    force.unref();
    if (serving) drain(signal);
    else console.error(`gw: ${signal} during the start: stopping once the store is open`);
  };
  const drain = (signal: string) => {
    const gw = gateway as Gateway;
    gw.app.log.info({ signal }, 'draining: finishing in-flight requests');
    gw.close()
      .then(() => simulator?.close())
      .then(
        () => exit(0),
        (err: unknown) => {
          gw.app.log.error({ err: errorSummary(err) }, 'shutdown failed');
          exit(1);
        },
      );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // Node's default for SIGHUP is to exit at once, dropping streams and unwritten usage. The configuration is read at
  // start only, so a HUP (a closed terminal, or a manager's "reload") stops as cleanly as a TERM; a restart reloads.
  process.on('SIGHUP', () => stop('SIGHUP'));
  signals.handOver();
  for (const signal of signals.early) stop(signal);
  let catalogue = config.file;
  if (catalogue === null) {
    // Loaded only in demo mode: a gateway with a configuration file never holds the simulator's code.
    const { startSimulator } = await import('@gw/simulator');
    simulator = await startSimulator();
    catalogue = simulator.demoConfig();
  }
  gateway = await createGateway({ config, catalogue });
  const { app, services } = gateway;
  if (stopping !== null) {
    await gateway.close();
    await simulator?.close();
    console.error(`gw: stopped (${stopping}) before serving`);
    exit(0);
  }
  // A misspelt variable would be ignored without a word: named (never its value, which may be a secret), and the start goes on.
  for (const { name, meant } of config.unknownVariables) {
    const guess =
      meant.length > 0
        ? `; did you mean ${[meant.slice(0, -1).join(', '), meant.at(-1)].filter(Boolean).join(' or ')}?`
        : ' (README lists the variables it reads)';
    app.log.warn({ variable: name }, `${name} is set, but the gateway reads no such variable: it is ignored${guess}`);
  }
  // Checked again: the port may have been taken while the store opened.
  await app.listen({ host: config.host, port: config.port }).catch(cannotListen(config));
  // Only once it serves: a start that fails to listen must not make the first key, which no later start prints.
  const first = await ensureFirstKey(services.store);
  const base = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${(app.server.address() as { port: number }).port}`;
  // As GET /v1/models counts them: a retired model is refused, not listed.
  const all = services.registry.list();
  const served = all.filter((m) => !m.deprecated).length;
  const models = `${served} model${served === 1 ? '' : 's'}${served < all.length ? ` (and ${all.length - served} retired)` : ''}`;
  const lines = [
    `gw ${services.version} listening on ${base}`,
    `  variant A: ${base}/v1      variant B: ${base}/alt/v1      OpenAPI: ${base}/openapi.json`,
    ...(simulator
      ? [
          `  DEMO MODE: no GW_CONFIG given, so requests go to simulated EU providers (${Object.keys(simulator.providers).join(', ')}) with a demo catalogue of ${models}.`,
          // Their ports are random: without them a user could not reach the faults and timings the simulator's README documents.
          `  their faults, timings and stats (packages/simulator/README.md): ${Object.values(simulator.providers)
            .map((p) => `${p.id} ${p.url}/__sim/`)
            .join('  ')}`,
        ]
      : [`  providers from ${config.configFile}: ${models}`]),
    `  store: ${config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PGlite in ${config.dataDir}`}; limiter: ${config.redisUrl ? 'Redis (REDIS_URL)' : 'in-process'}; admin API: ${config.adminToken ? 'on' : 'off (set GW_ADMIN_TOKEN)'}`,
  ];
  // A chat model this gateway serves (the demo's mistral/small, or the config's first), so the example answers.
  const example = services.registry.list().find((m) => m.kind === 'chat' && !m.deprecated)?.id;
  if (first) {
    lines.push(
      '',
      `  Created the first API key (shown once, keep it): ${first.key}`,
      example
        ? `  Try: curl ${base}/v1/chat/completions -H "Authorization: Bearer ${first.key}" -H "Content-Type: application/json" -d '{"model":"${example}","messages":[{"role":"user","content":"Bonjour"}]}'`
        : `  Try: curl ${base}/v1/models -H "Authorization: Bearer ${first.key}"`,
    );
  }
  // Plain stdout, not the structured log: the key must never reach a log pipeline.
  process.stdout.write(`${lines.join('\n')}\n`);
  serving = true;
  // A signal while it began to listen: the key made is shown above, then the drain.
  if (stopping !== null) drain(stopping);
}

function cannotListen(config: GatewayConfig): (err: unknown) => never {
  return (err) => {
    throw new Error(`cannot listen on ${config.host}:${config.port} (HOST, PORT): ${err instanceof Error ? err.message : String(err)}`);
  };
}

/** Signals main.ts caught while this code loaded, and how to stop catching them there once the start's own handlers are on. */
export interface EarlySignals {
  early: readonly string[];
  handOver: () => void;
}

export function start(signals: EarlySignals): void {
  main(signals).catch((err: unknown) => {
    // A setting found wrong only once its service answers (REDIS_URL's database): as any other bad setting.
    if (err instanceof ConfigError) {
      console.error(`gw: ${err.message}`);
      process.exit(2);
    }
    console.error('gw: failed to start:', err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
