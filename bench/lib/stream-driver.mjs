import { Agent, request } from 'node:http';

/** Finds the first SSE `data:` line whose chunk carries content; null until then. */
function firstContentIn(text) {
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    try {
      const chunk = JSON.parse(line.slice(6));
      const content = chunk.choices?.[0]?.delta?.content;
      if (typeof content === 'string' && content.length > 0) return content;
    } catch {
      // A partial line: wait for more bytes.
    }
  }
  return null;
}

/**
 * One streamed chat completion, timed from the request: first byte of the
 * answer (its headers), first content token, and the end after `[DONE]`.
 */
export function streamOnce({ agent, url, headers, body, timeoutMs = 60_000, onOpen = () => {}, onClose = () => {} }) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const timing = { ok: false, status: 0, error: null, ttfbMs: Number.NaN, ttftMs: Number.NaN, totalMs: Number.NaN };
    let pending = '';
    let tail = '';
    const req = request(url, { method: 'POST', agent, headers, timeout: timeoutMs }, (res) => {
      timing.ttfbMs = performance.now() - t0;
      timing.status = res.statusCode;
      onOpen();
      res.once('close', onClose);
      res.setEncoding('utf8');
      res.on('data', (text) => {
        tail = (tail + text).slice(-64);
        if (!Number.isNaN(timing.ttftMs)) return;
        pending += text;
        if (firstContentIn(pending) !== null) {
          timing.ttftMs = performance.now() - t0;
          pending = '';
        }
      });
      res.on('end', () => {
        timing.totalMs = performance.now() - t0;
        timing.ok = res.statusCode === 200 && tail.trimEnd().endsWith('data: [DONE]') && !Number.isNaN(timing.ttftMs);
        if (!timing.ok) timing.error = res.statusCode === 200 ? `ended without [DONE]: …${tail.trim().slice(-48)}` : `status ${res.statusCode}`;
        resolve(timing);
      });
      res.on('error', (err) => resolve({ ...timing, error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error('stream timed out')));
    req.on('error', (err) => resolve({ ...timing, error: err.message }));
    req.end(body);
  });
}

/** How many streams failed for each reason. */
function failureReasons(results) {
  const reasons = {};
  for (const r of results) if (!r.ok) reasons[r.error ?? 'unknown'] = (reasons[r.error ?? 'unknown'] ?? 0) + 1;
  return reasons;
}

/** Counts and timings of the streams that ended well; those marked `first` (a connection's first) go in `firstTtft` only. */
function collect(results, elapsedS) {
  const ok = results.filter((r) => r.ok);
  const steady = ok.filter((r) => !r.first);
  return {
    ok: ok.length,
    failed: results.length - ok.length,
    failures: failureReasons(results),
    elapsedS,
    streamsPerS: ok.length / elapsedS,
    ttfb: steady.map((r) => r.ttfbMs),
    ttft: steady.map((r) => r.ttftMs),
    total: steady.map((r) => r.totalMs),
    firstTtft: ok.filter((r) => r.first).map((r) => r.ttftMs),
  };
}

/**
 * `concurrency` streams at all times, each worker starting its next stream when one ends, for `durationS`.
 * Each worker's first stream opens its connection, all of them at once: as in runHttpLoad, those are kept
 * apart from the steady-state timings (`firstTtft`).
 */
export async function runStreamLoad({ url, headers, body, concurrency, durationS, maxStreams = 1_000_000 }) {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const results = [];
  const started = performance.now();
  const deadline = started + durationS * 1000;
  const worker = async () => {
    for (let first = true; performance.now() < deadline && results.length < maxStreams; first = false) {
      results.push({ ...(await streamOnce({ agent, url, headers, body })), first });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  agent.destroy();
  return collect(results, (performance.now() - started) / 1000);
}

/**
 * `count` streams requested at once. `peakOpen` is the most streams that had
 * their headers and had not ended at the same moment; `onSample` is called
 * every `sampleMs` until all have ended.
 */
export async function runStreamBurst({ url, headers, body, count, sampleMs = 50, onSample = () => {} }) {
  const agent = new Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
  let open = 0;
  let peakOpen = 0;
  const onOpen = () => {
    open++;
    peakOpen = Math.max(peakOpen, open);
  };
  const onClose = () => open--;
  const sampler = setInterval(() => onSample(open), sampleMs);
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: count }, () => streamOnce({ agent, url, headers, body, timeoutMs: 120_000, onOpen, onClose })));
  clearInterval(sampler);
  agent.destroy();
  return { ...collect(results, (performance.now() - started) / 1000), peakOpen };
}
