import { randomUUID } from 'node:crypto';
import { Confirmations } from '../auth/confirmations.js';
import type { Bus } from '../kv/types.js';
import { waitAtMost } from '../lib/wait-at-most.js';
import type { FallbackLedger } from './fallback-ledger.js';
import type { RedisLedger } from './redis-ledger.js';

/** A budget total loaded into Redis: `[nonce, tag, scope id]` (JSON); each instance confirms on the ack channel. */
const CHANNEL = 'gw:budget:loaded';
const ACK_CHANNEL = 'gw:budget:loaded:ack';
/** The longest the loading request waits for the other instances to have held their running requests again. */
const CONFIRM_TIMEOUT_MS = 250;
/** The longest the loading request waits for Redis to take the publish (the request path's command timeout); it goes on. */
const PUBLISH_WAIT_MS = 500;

/**
 * When an instance loads a budget total into Redis (it was missing: a new scope, or Redis lost it while requests ran,
 * FLUSHALL or an eviction, with no dropped connection to tell), every instance holds its running requests of that
 * scope again before the loading request is admitted: their holds may have gone with the total.
 */
export async function shareReholds(bus: Bus, shared: RedisLedger, ledger: FallbackLedger): Promise<void> {
  const confirmations = new Confirmations(CONFIRM_TIMEOUT_MS);
  await bus.subscribe(ACK_CHANNEL, (nonce) => confirmations.heard(nonce));
  await bus.subscribe(CHANNEL, (message) => {
    const [nonce, tag, scopeId] = JSON.parse(message) as [string, string, string];
    ledger
      .totalLoaded(tag, scopeId)
      .catch(() => {})
      .finally(() => bus.publish(ACK_CHANNEL, nonce).catch(() => {}));
  });
  shared.onTotalLoaded = async (tag, scopeId) => {
    const nonce = randomUUID();
    confirmations.expect(nonce);
    let receivers: number | undefined;
    await waitAtMost(
      bus.publish(CHANNEL, JSON.stringify([nonce, tag, scopeId])).then(
        (n) => {
          receivers = n;
        },
        () => {},
      ),
      PUBLISH_WAIT_MS,
    );
    if (receivers === undefined) {
      confirmations.forget(nonce);
      return;
    }
    await confirmations.wait(nonce, receivers);
  };
}
