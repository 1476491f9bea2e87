import { getHeapStatistics } from 'node:v8';

/**
 * The bytes of JSON request bodies this instance holds at once, each from its parse until its response closes. A
 * request's body is held three or four times over while it runs (its text, the parsed object, the provider's copy):
 * 40 bodies of 4 MB took the process 600 MB past its idle size, and under a heap bound (`--max-old-space-size`, a
 * container's memory) enough of them at once ended it out of memory, every request in flight lost. Past the bound a
 * body is refused (503 `out_of_resources`) rather than held; one alone is always taken, whatever its size.
 */
export class BodyMemory {
  held = 0;

  constructor(readonly limit: number) {}

  take(bytes: number): boolean {
    if (this.held > 0 && this.held + bytes > this.limit) return false;
    this.held += bytes;
    return true;
  }

  release(bytes: number): void {
    this.held -= bytes;
  }
}

/** GW_BODY_MEMORY_MB in bytes; 0: a sixteenth of V8's heap limit, at four copies a quarter of the heap. */
export function bodyMemoryBytes(mb: number): number {
  return mb > 0 ? mb * 1024 * 1024 : Math.floor(getHeapStatistics().heap_size_limit / 16);
}
