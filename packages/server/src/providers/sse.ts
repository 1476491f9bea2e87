import { createParser, type EventSourceMessage } from 'eventsource-parser';

/** Parses an upstream SSE body into events as they arrive (a spec-correct parser, not line splitting). */
export async function* sseEvents(body: AsyncIterable<Uint8Array>): AsyncGenerator<EventSourceMessage> {
  const queue: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (event) => queue.push(event) });
  const decoder = new TextDecoder();
  for await (const bytes of body) {
    parser.feed(decoder.decode(bytes, { stream: true }));
    while (queue.length > 0) yield queue.shift() as EventSourceMessage;
  }
  parser.feed(decoder.decode());
  while (queue.length > 0) yield queue.shift() as EventSourceMessage;
}
