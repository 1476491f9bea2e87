import autocannon from 'autocannon';

/**
 * Closed-loop HTTP load with autocannon at fixed concurrency. Latencies are
 * taken from autocannon's per-response event (hrtime, sub-millisecond),
 * not from its histogram, which rounds to whole milliseconds.
 */
export function runHttpLoad({ url, headers, body, connections, durationS }) {
  return new Promise((resolve, reject) => {
    const latencies = [];
    const failures = {};
    const started = performance.now();
    const instance = autocannon({ url, method: 'POST', headers, body, connections, duration: durationS, timeout: 10 }, (err, result) => {
      if (err) return reject(err);
      const elapsedS = (performance.now() - started) / 1000;
      if (result.errors > 0) failures['connection errors'] = result.errors;
      if (result.timeouts > 0) failures.timeouts = result.timeouts;
      const failed = Object.values(failures).reduce((a, b) => a + b, 0);
      resolve({ ok: latencies.length, failed, failures, elapsedS, rps: latencies.length / elapsedS, latencies });
    });
    instance.on('response', (_client, status, _bytes, ms) => {
      if (status === 200) latencies.push(ms);
      else failures[`status ${status}`] = (failures[`status ${status}`] ?? 0) + 1;
    });
  });
}
