// What the profiling tools (profile.mjs, alloc-profile.mjs) share: the loads they profile, and the
// services around the gateway (the fake upstream and, with --prod, PostgreSQL and Redis, on core 1).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gatewayModelId } from '../upstream/profiles.mjs';
import { runHttpLoad } from './http-load.mjs';
import { killChildrenOnExit, pinSelf, removeIfInterrupted } from './processes.mjs';
import { startGateway, startPostgresPinned, startRedis, startUpstream } from './services.mjs';
import { runStreamLoad } from './stream-driver.mjs';

/** A chat completion request to the gateway for one upstream profile (bench/upstream/profiles.mjs). */
export function chatRequest(gateway, upstreamModel, stream) {
  const body = { model: gatewayModelId(upstreamModel), messages: [{ role: 'user', content: 'Say something short about foxes.' }], max_tokens: 64 };
  if (stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return {
    url: `${gateway.url}/v1/chat/completions`,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gateway.key}` },
    body: JSON.stringify(body),
  };
}

/** Non-streamed chat completions of `upstreamModel` at 50 connections. */
const httpLoad = (upstreamModel) => async (gateway, durationS) => {
  const r = await runHttpLoad({ ...chatRequest(gateway, upstreamModel, false), connections: 50, durationS });
  return { done: r.ok + r.failed, text: `${r.rps.toFixed(0)} req/s, ${r.failed} failed ${JSON.stringify(r.failures)}` };
};

/** The loads, each for `durationS`: how many requests or streams were done, and a line saying how it went. */
export const PROFILE_LOADS = {
  'http-0ms': httpLoad('fixed-0ms'),
  // The latency scenario: about 1,000 requests/s, the gateway's core about a third busy.
  'http-50ms': httpLoad('fixed-50ms'),
  // PROFILE_STREAM_MODEL: another upstream profile for the streams (stream-50ms-200x10ms: mostly chunks).
  stream: async (gateway, durationS) => {
    const model = process.env.PROFILE_STREAM_MODEL ?? 'stream-50ms-20x10ms';
    const r = await runStreamLoad({ ...chatRequest(gateway, model, true), concurrency: 50, durationS });
    return { done: r.ok + r.failed, text: `${r.streamsPerS.toFixed(0)} streams/s, ${r.failed} failed` };
  },
};

/**
 * Starts what the gateway talks to, then runs `profileOne(name, { dir, startGateway })` for each of
 * `names` (PROFILE_ONLY: that one only), printing what it returns; `startGateway(nodeFlags)` starts a
 * gateway for that load on core 0, wired to those services. Returns the exit code. The run's
 * directory (the gateway's log) is removed, unless the run failed or KEEP=1. With `prod` and
 * PROFILE_REDIS_KILLED=1 (one load only), Redis is killed once the gateway has started.
 */
export async function runProfiles({ tool, prod, names }, profileOne) {
  const selected = names.filter((n) => !process.env.PROFILE_ONLY || n === process.env.PROFILE_ONLY);
  const redisKilled = prod && process.env.PROFILE_REDIS_KILLED === '1';
  if (redisKilled && selected.length > 1) throw new Error('PROFILE_REDIS_KILLED=1 takes one load (PROFILE_ONLY)');
  killChildrenOnExit();
  pinSelf(1);
  const dir = mkdtempSync(join(tmpdir(), `gw-${tool}-`));
  removeIfInterrupted(dir);
  const upstream = await startUpstream({ core: 1, dir });
  const postgres = prod ? await startPostgresPinned({ core: 1 }) : null;
  const redis = prod ? await startRedis({ core: 1, dir }) : null;
  const backends = { redisUrl: redis?.url ?? null, databaseUrl: postgres?.url ?? null };
  let failed = false;
  try {
    for (const name of selected)
      process.stdout.write(
        `${await profileOne(name, {
          dir,
          startGateway: async (nodeFlags) => {
            const gateway = await startGateway({ core: 0, dir, name: `gateway-${name}`, upstreamUrl: upstream.url, ...backends, nodeFlags });
            // The bench's last scenario: Redis gone under a running gateway, which fails open.
            if (redisKilled) await redis?.kill();
            return gateway;
          },
        })}\n\n`,
      );
    return 0;
  } catch (err) {
    process.stderr.write(`[${tool}] failed: ${err instanceof Error ? err.stack : err}\n  logs: ${dir}\n`);
    failed = true;
    return 1;
  } finally {
    await upstream.stop();
    await redis?.kill();
    await postgres?.stop();
    if (!failed && !process.env.KEEP) rmSync(dir, { recursive: true, force: true });
  }
}
