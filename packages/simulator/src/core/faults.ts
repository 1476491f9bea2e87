/** The current fault of one provider: validation, scoping and consumption. */
import { ENDPOINTS, type Endpoint, type Fault, type WireType } from '../types.js';

const KINDS = new Set(['status', 'hang', 'latency', 'slow_first_byte', 'stall', 'reset', 'truncate', 'error_after_200', 'content_filter']);

export interface RequestScope {
  endpoint: Endpoint;
  model: string | null;
  stream: boolean;
}

export class FaultState {
  private current: Fault | null = null;
  private remaining = Number.POSITIVE_INFINITY;
  private skipping = 0;

  /** `type`: the provider's wire, as a content filter is Azure's alone. */
  constructor(private readonly type?: WireType) {}

  get(): Fault | null {
    return this.current === null ? null : { ...this.current };
  }

  set(fault: Fault): void {
    validateFault(fault);
    // Elsewhere it would match chat requests and be spent on them with no effect.
    if (fault.kind === 'content_filter' && this.type !== undefined && this.type !== 'azure') {
      throw new Error(`content_filter faults are Azure's: this provider's wire is ${this.type}`);
    }
    this.current = { ...fault };
    this.remaining = fault.times ?? Number.POSITIVE_INFINITY;
    this.skipping = fault.skip ?? 0;
  }

  clear(): void {
    this.current = null;
  }

  /** The fault to apply to this request, if it matches; counts down `times`. */
  take(req: RequestScope): Fault | null {
    const f = this.current;
    if (f === null || !matches(f, req)) return null;
    if (this.skipping > 0) {
      this.skipping -= 1;
      return null;
    }
    this.remaining -= 1;
    if (this.remaining <= 0) this.current = null;
    return f;
  }
}

function matches(f: Fault, req: RequestScope): boolean {
  if (f.model !== undefined && f.model !== req.model) return false;
  const endpoints = f.endpoints ?? ENDPOINTS.filter((e) => e !== 'models');
  if (!endpoints.includes(req.endpoint)) return false;
  if (f.kind === 'error_after_200' && !req.stream) return false;
  if (f.kind === 'content_filter' && req.endpoint !== 'chat') return false;
  return true;
}

/** Throws a readable error for a malformed fault (the HTTP control route answers 400 with it). */
export function validateFault(f: unknown): asserts f is Fault {
  if (typeof f !== 'object' || f === null) throw new Error('fault must be an object');
  const o = f as Record<string, unknown>;
  if (typeof o['kind'] !== 'string' || !KINDS.has(o['kind'])) throw new Error(`fault.kind must be one of ${[...KINDS].join(', ')}`);
  if (o['kind'] === 'status' && (typeof o['status'] !== 'number' || o['status'] < 100 || o['status'] > 599)) {
    throw new Error('status fault needs a numeric status 100-599');
  }
  for (const k of ['ms', 'perChunkMs'] as const) {
    const v = o[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isFinite(v) || v < 0)) throw new Error(`fault.${k} must be a number >= 0`);
  }
  // Counts: `times: 0` would otherwise fail one request, and a fraction match no chunk.
  for (const k of ['afterChunks', 'skip'] as const) {
    if (o[k] !== undefined && (!Number.isInteger(o[k]) || (o[k] as number) < 0)) throw new Error(`fault.${k} must be a whole number >= 0`);
  }
  if (o['times'] !== undefined && (!Number.isInteger(o['times']) || (o['times'] as number) < 1)) throw new Error('fault.times must be a whole number >= 1');
  if ((o['kind'] === 'latency' || o['kind'] === 'slow_first_byte' || o['kind'] === 'stall') && typeof o['ms'] !== 'number') {
    throw new Error(`${o['kind']} fault needs ms`);
  }
  if (o['kind'] === 'stall' && typeof o['afterChunks'] !== 'number') throw new Error('stall fault needs afterChunks');
  if (o['kind'] === 'content_filter' && o['on'] !== 'prompt' && o['on'] !== 'completion') {
    throw new Error('content_filter fault needs on: "prompt" | "completion"');
  }
  const endpoints = o['endpoints'];
  if (endpoints !== undefined && (!Array.isArray(endpoints) || !endpoints.every((e) => (ENDPOINTS as readonly unknown[]).includes(e)))) {
    throw new Error(`fault.endpoints must be a list of ${ENDPOINTS.join(', ')}`);
  }
  if (o['model'] !== undefined && typeof o['model'] !== 'string') throw new Error('fault.model must be a string');
}
