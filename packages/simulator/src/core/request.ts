/** Reading one request: URL split, body buffered and parsed as the route expects, model and stream flag. */
import type { IncomingMessage } from 'node:http';
import type { Route } from '../wire/types.js';
import { BodyTooLarge, isRecord, readBody } from './http.js';
import { boundaryOf, field, type Multipart, parseMultipart } from './multipart.js';

const JSON_LIMIT = 10 * 1024 * 1024;
const UPLOAD_LIMIT = 30 * 1024 * 1024;

export interface Target {
  method: string;
  path: string;
  query: URLSearchParams;
}

export function targetOf(req: IncomingMessage): Target {
  const url = req.url ?? '/';
  const qi = url.indexOf('?');
  return {
    method: req.method ?? 'GET',
    path: qi < 0 ? url : url.slice(0, qi),
    query: new URLSearchParams(qi < 0 ? '' : url.slice(qi + 1)),
  };
}

export interface ParsedBody {
  json: unknown;
  multipart: Multipart | null;
  /** Why the body could not be parsed, if it could not. */
  badBody: string | null;
  /** Model from the path (Azure deployment), the JSON body or the form. */
  model: string | null;
  stream: boolean;
}

/** Parse the body for `route`; 'too_large' past the cap (the route's own, else 30 MB uploads, 10 MB JSON). */
export async function parseBody(req: IncomingMessage, route: Route | null): Promise<ParsedBody | 'too_large'> {
  let raw: Buffer;
  try {
    raw = await readBody(req, route?.maxBytes ?? (route?.body === 'multipart' ? UPLOAD_LIMIT : JSON_LIMIT));
  } catch (err) {
    if (err instanceof BodyTooLarge) return 'too_large';
    throw err;
  }
  let json: unknown;
  let multipart: Multipart | null = null;
  let badBody: string | null = null;
  if (route?.body === 'json') {
    try {
      json = raw.length === 0 ? undefined : JSON.parse(raw.toString('utf8'));
    } catch {
      badBody = 'Invalid JSON body';
    }
  } else if (route?.body === 'multipart') {
    const boundary = boundaryOf(req.headers['content-type']);
    multipart = boundary === null ? null : parseMultipart(raw, boundary);
    if (multipart === null) badBody = 'Expected a multipart/form-data body';
  }
  const bodyModel = isRecord(json) && typeof json['model'] === 'string' ? json['model'] : undefined;
  const model = route?.pathModel ?? bodyModel ?? (multipart ? field(multipart, 'model') : undefined) ?? null;
  const stream = (isRecord(json) && json['stream'] === true) || (multipart !== null && field(multipart, 'stream') === 'true');
  return { json, multipart, badBody, model, stream };
}
