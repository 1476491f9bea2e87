import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { formatEnv } from '../../scripts/malloc-env.mjs';
import { undiciIdleCheckPatched } from '../../scripts/patch-undici.mjs';
import { benchOneCoreFlags, PRODUCTION_PROCESS_ENV, START_CONFIG } from './services.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;

function quiet(command, args) {
  try {
    return execFileSync(command, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

/** The version of package `name` as `from` (a file, relative to the repository or absolute) resolves it: the gateway's own, by default. */
export function packageVersion(name, from = 'packages/server/package.json') {
  try {
    const file = createRequire(from.startsWith('/') ? from : `${ROOT}${from}`).resolve(`${name}/package.json`);
    return JSON.parse(readFileSync(file, 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

/** What anyone rerunning the bench needs to compare: hardware, software versions, commit. */
export function machineFacts() {
  const cpus = os.cpus();
  // The bench's own outputs (this report, bench/results) are not changes to what it measures.
  const dirty = quiet('git', ['status', '--porcelain', '--', '.', ':!docs/performance.md', ':!bench/results']) !== '';
  return {
    date: new Date().toISOString(),
    cpuModel: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    totalMemGiB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    autocannon: packageVersion('autocannon', 'package.json'),
    fastify: packageVersion('fastify'),
    undici: `${packageVersion('undici')}${undiciIdleCheckPatched() ? ' (idle-socket check at response end, scripts/patch-undici.mjs)' : ' (as published)'}`,
    nodeFlags: START_CONFIG.nodeFlags,
    processEnv: formatEnv(PRODUCTION_PROCESS_ENV),
    oneCoreFlags: benchOneCoreFlags().join(' '),
    redis: /v=(\S+)/.exec(quiet('/usr/bin/redis-server', ['--version']))?.[1] ?? 'unknown',
    commit: `${quiet('git', ['rev-parse', '--short', 'HEAD'])}${dirty ? ' + uncommitted changes' : ''}`,
  };
}
