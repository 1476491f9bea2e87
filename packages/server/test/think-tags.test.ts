import { describe, expect, it } from 'vitest';
import { splitThinkTags, ThinkTagSplitter } from '../src/providers/think-tags.js';

/** Feeds `pieces` as a stream's content deltas and returns what reasoning and content came out, all told. */
function streamed(pieces: string[]): { reasoning: string; content: string } {
  const splitter = new ThinkTagSplitter();
  const out = { reasoning: '', content: '' };
  for (const piece of pieces) {
    const r = splitter.push(piece);
    out.reasoning += r.reasoning;
    out.content += r.content;
  }
  const rest = splitter.flush();
  return { reasoning: out.reasoning + rest.reasoning, content: out.content + rest.content };
}

const R1 = '<think>\nThe user greets me.\nI greet back.\n</think>\n\nBonjour !';

describe('reasoning between <think> tags', () => {
  it('splits a whole answer: the tags and the whitespace around them go', () => {
    expect(splitThinkTags(R1)).toEqual({ reasoning: 'The user greets me.\nI greet back.\n', content: 'Bonjour !' });
    expect(splitThinkTags('  <think>cut off while thin')).toEqual({ reasoning: 'cut off while thin', content: '' });
  });

  it('leaves content that does not open with the tag as it is, whatever it says later', () => {
    for (const text of ['Bonjour', 'Use <think> tags like this: <think>x</think>', '', 'a </think> b']) {
      expect(splitThinkTags(text)).toEqual({ reasoning: null, content: text });
    }
  });

  it('gives a stream the same split wherever its deltas cut the text, tags included', () => {
    const whole = splitThinkTags(R1);
    for (let a = 1; a < R1.length; a++) {
      for (const b of [a + 1, a + 3, a + 9]) {
        expect(streamed([R1.slice(0, a), R1.slice(a, b), R1.slice(b)])).toEqual(whole);
      }
    }
    expect(streamed([...R1])).toEqual(whole);
    // Whitespace before the tag, in a delta of its own: dropped, as from the whole answer, not sent ahead as content.
    expect(streamed(['\n', `\n${R1}`])).toEqual(splitThinkTags(`\n\n${R1}`));
  });

  it('passes a stream without the tag at once, a held "<" included, and then changes nothing', () => {
    const splitter = new ThinkTagSplitter();
    expect(splitter.push('<')).toEqual({ reasoning: '', content: '' });
    expect(splitter.push('b>bold</b>')).toEqual({ reasoning: '', content: '<b>bold</b>' });
    expect(splitter.passing).toBe(true);
    expect(streamed(['\n', 'Hello'])).toEqual({ reasoning: '', content: '\nHello' });
    // Whitespace is held until the next delta tells (a tag may follow), and given back at the choice's end.
    expect(streamed(['\n'])).toEqual({ reasoning: '', content: '\n' });
    expect(streamed(['<thi'])).toEqual({ reasoning: '', content: '<thi' });
  });

  it('keeps a stream cut off while thinking as reasoning, a closing tag in pieces included', () => {
    expect(streamed(['<think>', 'still going </thi'])).toEqual({ reasoning: 'still going </thi', content: '' });
  });
});
