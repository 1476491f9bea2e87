/**
 * How the fake upstream behaves, chosen by the model name of each request,
 * so that one server serves every scenario without a control channel.
 *
 * latencyMs: wait before a non-streamed answer.
 * ttftMs: wait between the stream's headers and its first content chunk.
 * chunks / gapMs: content chunks in a stream and the gap between them.
 */
export const UPSTREAM_PROFILES = Object.freeze({
  'fixed-0ms': { latencyMs: 0, ttftMs: 0, chunks: 20, gapMs: 0 },
  'fixed-50ms': { latencyMs: 50, ttftMs: 50, chunks: 20, gapMs: 0 },
  'stream-50ms-20x10ms': { latencyMs: 250, ttftMs: 50, chunks: 20, gapMs: 10 },
  'stream-50ms-20x100ms': { latencyMs: 2000, ttftMs: 50, chunks: 20, gapMs: 100 },
  'stream-50ms-200x10ms': { latencyMs: 2050, ttftMs: 50, chunks: 200, gapMs: 10 },
  // Long enough that 1,000 requested at once are all open together under the heap profiler (bench/alloc-profile.mjs).
  'stream-50ms-20x400ms': { latencyMs: 8000, ttftMs: 50, chunks: 20, gapMs: 400 },
});

export const UPSTREAM_MODELS = Object.keys(UPSTREAM_PROFILES);

/** The gateway's model id for an upstream model. */
export function gatewayModelId(upstreamModel) {
  return `bench/${upstreamModel}`;
}
