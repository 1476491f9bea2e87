import { hiddenSlot } from '../lib/hidden-slot.js';
import { withoutKnownSecrets } from '../lib/redact.js';
import type { ChatChunk } from './types.js';

/**
 * The provider's own JSON of a chunk an adapter passed on unchanged: a
 * spread copy (a changed chunk) and serialisation never see it. As a
 * WeakMap it cost about 1.5-3 µs more per chunk, mostly in the collector.
 */
const wireText = hiddenSlot<ChatChunk, string>('wireText');

/** Marks `chunk` as exactly what `text` says, so it can be relayed without being serialised again. */
export function keepWireText(chunk: ChatChunk, text: string): ChatChunk {
  return wireText.set(chunk, text);
}

/**
 * The chunk's JSON with its `model` set to the gateway's model id. A chunk
 * that came unchanged is relayed as the provider wrote it, with only the
 * top-level model name spliced in; any other is serialised. A provider key echoed in it is taken out either way:
 * one the provider wrote with `\u` escapes of letters or digits (which its client's parser reads as the key) is found
 * in the chunk serialised, where it stands plain.
 */
export function chunkJson(chunk: ChatChunk, model: string): string {
  const text = wireText.get(chunk);
  if (text !== undefined) {
    const spliced = spliceModel(text, chunk.model, model);
    if (spliced !== null && !escapesAscii(spliced)) return withoutKnownSecrets(spliced);
  }
  return withoutKnownSecrets(JSON.stringify({ ...chunk, model }));
}

/**
 * A `\u` escape of a character keys are made of (letters, digits, `+/=-._`), which no serialiser needs: they escape
 * quotes, backslashes and control characters, Go's `<>&` too, and some everything past ASCII (Python's json by
 * default). So is `\/`, which PHP's json_encode writes for every `/` (of a base64 key, `openssl rand -base64`'s): its
 * client reads the key. One `includes` per chunk without a backslash, and a test only on a chunk with an escape.
 */
const ASCII_ESCAPE = /\\u00(?:2[bdefBDEF]|3[0-9dD]|[46][1-9a-fA-F]|[57][0-9aA]|5[fF])/;

function escapesAscii(text: string): boolean {
  if (!text.includes('\\')) return false;
  return text.includes('\\/') || (text.includes('\\u') && ASCII_ESCAPE.test(text));
}

/**
 * `text` with its top-level `"model":"<from>"` replaced, or null when that
 * exact compact pair is not found once at the top level, or when the text
 * has a line break (it would end the SSE data line early).
 */
export function spliceModel(text: string, from: string, to: string): string | null {
  const needle = `"model":${JSON.stringify(from)}`;
  const at = text.indexOf(needle);
  if (at === -1 || text.indexOf(needle, at + needle.length) !== -1 || !atTopLevel(text, at) || /[\r\n]/.test(text)) return null;
  // join() builds one flat string: a template literal would keep slices of `text`, and through them the
  // whole network read it came from, alive for as long as the stream's buffer keeps the event.
  return [text.slice(0, at), '"model":', JSON.stringify(to), text.slice(at + needle.length)].join('');
}

/** Whether position `at` of a JSON object's text is a key of the outermost object (not inside a string or a nested value). */
function atTopLevel(text: string, at: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < at; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return depth === 1 && !inString;
}
