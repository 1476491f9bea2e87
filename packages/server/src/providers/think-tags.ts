/**
 * Reasoning that a model writes into its content between `<think>` and
 * `</think>` (DeepSeek R1 distills as Scaleway's legacy deployment serves
 * them; PROVIDERS.md 3.2, item 3) taken out into `reasoning_content`, the
 * field the other reasoning styles are normalised to. Only content that
 * opens with the tag (after whitespace) is split; content without it is
 * the answer, whatever it says later.
 */
const OPEN = '<think>';
const CLOSE = '</think>';
const OPENS = /^\s*<think>/;
/**
 * The most whitespace a stream holds back at the end of its reasoning (it is dropped if `</think>` follows): a
 * model writes a newline or two there; a longer run is reasoning that goes on, passed as it comes.
 */
const MAX_HELD_SPACE = 16;

/** Whether content opens with the tag (after whitespace): the test every answer passes through, without a copy. */
export function opensWithThinkTag(content: string): boolean {
  return OPENS.test(content);
}

/** A whole answer's content: its reasoning (null without the tag) and the answer after it. */
export function splitThinkTags(content: string): { reasoning: string | null; content: string } {
  if (!opensWithThinkTag(content)) return { reasoning: null, content };
  const start = content.trimStart();
  const rest = start.slice(OPEN.length).trimStart();
  const end = rest.indexOf(CLOSE);
  // Cut off while thinking (its length limit reached): all of it is reasoning, and there is no answer.
  if (end === -1) return { reasoning: rest, content: '' };
  // Without the whitespace inside the tags and after them, as DeepSeek's own API and vLLM's reasoning parser give it.
  return { reasoning: rest.slice(0, end).trimEnd(), content: rest.slice(end + CLOSE.length).trimStart() };
}

/**
 * The same for a stream, one content delta at a time: a tag may arrive in
 * pieces, so what could be the start of one is held back until the next
 * delta tells; so is the whitespace that ends the reasoning so far, which
 * goes if `</think>` follows. Holds at most a few characters, and nothing
 * once the answer has begun without the tag (`passing`).
 */
export class ThinkTagSplitter {
  private state: 'start' | 'thinking' | 'answer' = 'start';
  private held = '';
  /** After `</think>` (or `<think>`), the whitespace that separates it from what follows is dropped. */
  private trimNext = false;

  /** True once nothing is changed any more: the stream's content passes as it comes. */
  get passing(): boolean {
    return this.state === 'answer' && !this.trimNext && this.held === '';
  }

  /** One content delta: what of it (and of what was held) is reasoning, and what is content. Either may be ''. */
  push(text: string): { reasoning: string; content: string } {
    let s = this.held + text;
    this.held = '';
    if (this.state === 'start') {
      const start = s.trimStart();
      if (start.startsWith(OPEN)) {
        this.state = 'thinking';
        this.trimNext = true;
        s = start.slice(OPEN.length);
      } else if (OPEN.startsWith(start)) {
        // Whitespace, or a tag in pieces ("<thi"): the next delta tells. Whitespace passed at once would be content
        // ahead of the reasoning when `<think>` follows, where the whole answer (splitThinkTags) drops it.
        this.held = s;
        return { reasoning: '', content: '' };
      } else {
        this.state = 'answer';
        return { reasoning: '', content: s };
      }
    }
    let reasoning = '';
    if (this.state === 'thinking') {
      s = this.trimmed(s);
      const end = s.indexOf(CLOSE);
      if (end === -1) {
        let keep = closingTagStart(s);
        const space = s.length - keep - s.slice(0, s.length - keep).trimEnd().length;
        if (space <= MAX_HELD_SPACE) keep += space;
        this.held = s.slice(s.length - keep);
        return { reasoning: s.slice(0, s.length - keep), content: '' };
      }
      reasoning = s.slice(0, end).trimEnd();
      s = s.slice(end + CLOSE.length);
      this.state = 'answer';
      this.trimNext = true;
    }
    return { reasoning, content: this.trimmed(s) };
  }

  /** At the end of the choice: what was held back (a tag's start that never completed is text as it was). */
  flush(): { reasoning: string; content: string } {
    const held = this.held;
    this.held = '';
    if (this.state === 'thinking') return { reasoning: held, content: '' };
    if (this.state === 'start') this.state = 'answer';
    return { reasoning: '', content: held };
  }

  private trimmed(s: string): string {
    if (!this.trimNext) return s;
    const t = s.trimStart();
    if (t !== '') this.trimNext = false;
    return t;
  }
}

/** How many characters at the end of `s` could begin `</think>`. */
function closingTagStart(s: string): number {
  for (let n = Math.min(CLOSE.length - 1, s.length); n > 0; n--) if (CLOSE.startsWith(s.slice(s.length - n))) return n;
  return 0;
}
