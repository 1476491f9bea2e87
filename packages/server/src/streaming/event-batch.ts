import type { StreamEvent, StreamEventKind } from './types.js';

/**
 * Several consecutive events of a stream as one string, for one entry of
 * the Redis resume buffer: `<seq> <kind> <length>\n<data>` per event, the
 * length in UTF-16 code units. Length-prefixed rather than escaped, so the
 * data (a chunk's JSON, which may hold any character) is copied, never
 * rewritten. The length survives Redis: what it stores is the UTF-8 of the
 * string, read back as the same string (a lone surrogate, the one thing
 * that could not be, is written as U+FFFD, also one code unit).
 */
export function encodeEvents(events: readonly StreamEvent[]): string {
  let text = '';
  for (const e of events) text += `${e.seq} ${e.kind} ${e.data.length}\n${e.data}`;
  return text;
}

const KINDS = new Set<string>(['chunk', 'usage', 'done', 'error']);

/** The events of {@link encodeEvents}' text, in order; throws on text it did not write. */
export function decodeEvents(text: string): StreamEvent[] {
  const events: StreamEvent[] = [];
  let at = 0;
  while (at < text.length) {
    const eol = text.indexOf('\n', at);
    const [seqText, kind, lengthText] = (eol < 0 ? '' : text.slice(at, eol)).split(' ');
    const seq = Number(seqText);
    const length = Number(lengthText);
    const end = eol + 1 + length;
    if (!Number.isSafeInteger(seq) || seq < 1 || !KINDS.has(kind as string) || !Number.isSafeInteger(length) || length < 0 || end > text.length) {
      throw new Error(`unreadable resume buffer entry at offset ${at}`);
    }
    events.push({ seq, kind: kind as StreamEventKind, data: text.slice(eol + 1, end) });
    at = end;
  }
  return events;
}
