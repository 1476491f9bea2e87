/**
 * Streamed tool calls as OpenAI's clients put them together: by `index` alone. Hosts do not all key them so:
 * Mistral sends each call whole in its own chunk without `index` (its SDK then reads 0 for every call), and for some
 * models sends fragments whose continuations carry the placeholder id "null" and rely on their wire `index`; a client
 * keying by what came would merge two calls into one, with both arguments concatenated. A stream's calls are
 * numbered here, per choice: a fragment with an id not seen before opens the next call; one without a real id
 * continues the call its wire index opened (an index not seen before opens one), else the last call.
 */

/** Ids some hosts put on continuation fragments, which name no call. */
const PLACEHOLDER_IDS = new Set(['', 'null', 'none', 'undefined']);

function realId(id: unknown): string | null {
  return typeof id === 'string' && !PLACEHOLDER_IDS.has(id.toLowerCase()) ? id : null;
}

/** One choice's calls so far: the id and the wire index each was opened with (-1 for none). */
interface ChoiceCalls {
  ids: (string | null)[];
  wire: number[];
}

/** The state of one stream's tool calls; made at its first tool-call delta, so a stream without any pays nothing. */
export class StreamToolCalls {
  private readonly choices = new Map<number, ChoiceCalls>();

  /**
   * The delta's calls, each with its own `index`, `type: "function"` on the fragment that opens it, and neither a
   * placeholder id nor an empty name on a continuation; the same array when every call already came so.
   */
  index(choice: number, calls: unknown[]): unknown[] {
    let state = this.choices.get(choice);
    if (state === undefined) {
      state = { ids: [], wire: [] };
      this.choices.set(choice, state);
    }
    let out: unknown[] | null = null;
    for (let i = 0; i < calls.length; i++) {
      const call = (calls[i] ?? {}) as Record<string, unknown>;
      const id = realId(call['id']);
      const wire = typeof call['index'] === 'number' ? call['index'] : -1;
      let at = id === null ? -1 : state.ids.indexOf(id);
      let opens = false;
      if (at < 0 && id === null) at = wire >= 0 ? state.wire.lastIndexOf(wire) : state.ids.length - 1;
      if (at < 0) {
        at = state.ids.length;
        state.ids.push(id);
        state.wire.push(wire);
        opens = true;
      }
      const placeholder = id === null && typeof call['id'] === 'string';
      const fn = call['function'] as { name?: unknown } | null | undefined;
      const emptyName = !opens && fn?.name === '';
      const untyped = opens && call['type'] === undefined;
      if (at === wire && !placeholder && !emptyName && !untyped) continue;
      const fixed: Record<string, unknown> = { ...call, index: at };
      if (placeholder) delete fixed['id'];
      if (emptyName) {
        const { name: _name, ...rest } = fn as Record<string, unknown>;
        fixed['function'] = rest;
      }
      if (untyped) fixed['type'] = 'function';
      out ??= calls.slice();
      out[i] = fixed;
    }
    return out ?? calls;
  }
}

/** Whether a chunk's choices carry tool-call deltas: what makes a stream need its {@link StreamToolCalls}. */
export function hasToolCallDeltas(choices: unknown): boolean {
  if (!Array.isArray(choices)) return false;
  for (const choice of choices) {
    if (Array.isArray((choice as { delta?: { tool_calls?: unknown } | null } | null)?.delta?.tool_calls)) return true;
  }
  return false;
}
