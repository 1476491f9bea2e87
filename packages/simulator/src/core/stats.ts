/** Call counts and the last request of one provider. */
import type { FaultKind, LastRequest, ProviderStats, RequestRecord } from '../types.js';

const RECENT = 50;

export class StatsRecorder {
  private s: ProviderStats;
  private lastRec: RequestRecord | null = null;

  constructor(private readonly id: string) {
    this.s = StatsRecorder.empty(id);
  }

  private static empty(id: string): ProviderStats {
    return { id, total: 0, byEndpoint: {}, byModel: {}, byStatus: {}, authFailures: 0, faultsApplied: 0, inFlight: 0, last: null, recent: [] };
  }

  /** Count an arriving request; the returned record is completed by `finish`. */
  begin(last: LastRequest): RequestRecord {
    const s = this.s;
    s.total += 1;
    s.inFlight += 1;
    if (last.endpoint) s.byEndpoint[last.endpoint] = (s.byEndpoint[last.endpoint] ?? 0) + 1;
    if (last.model) s.byModel[last.model] = (s.byModel[last.model] ?? 0) + 1;
    s.last = last;
    const rec: RequestRecord = {
      at: last.at,
      method: last.method,
      path: last.path,
      endpoint: last.endpoint,
      model: last.model,
      stream: last.stream,
      status: null,
      fault: null,
    };
    this.lastRec = rec;
    s.recent.push(rec);
    if (s.recent.length > RECENT) s.recent.shift();
    return rec;
  }

  fault(rec: RequestRecord, kind: FaultKind): void {
    rec.fault = kind;
    if (this.s.last && rec === this.lastRec) this.s.last.fault = kind;
    this.s.faultsApplied += 1;
  }

  authFailure(): void {
    this.s.authFailures += 1;
  }

  finish(rec: RequestRecord, status: number): void {
    rec.status = status;
    if (this.s.last && rec === this.lastRec) this.s.last.status = status;
    this.s.byStatus[String(status)] = (this.s.byStatus[String(status)] ?? 0) + 1;
    this.s.inFlight = Math.max(0, this.s.inFlight - 1);
  }

  snapshot(): ProviderStats {
    return structuredClone(this.s);
  }

  reset(): void {
    const inFlight = this.s.inFlight;
    this.s = StatsRecorder.empty(this.id);
    this.lastRec = null;
    this.s.inFlight = inFlight;
  }
}
