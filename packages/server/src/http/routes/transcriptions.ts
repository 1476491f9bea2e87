import { tmpdir } from 'node:os';
import { H, LANGUAGE_CODE } from '@gw/schema';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../errors/gateway-error.js';
import { UpstreamError } from '../../errors/upstream-error.js';
import { warnOnFailure } from '../../lib/error-summary.js';
import { withoutKnownSecrets } from '../../lib/redact.js';
import type { ProviderAdapter, Transcription, TranscriptionRequest, UpstreamCall } from '../../providers/types.js';
import { executePlan } from '../../routing/execute.js';
import { heldCost, planOffers } from '../../routing/plan.js';
import type { Offer } from '../../routing/registry.js';
import { AUDIO_EXTENSIONS, audioContainer, CONTAINER_TYPES, containerSeconds, readHead, toldSeconds, upstreamFilename } from '../audio-container.js';
import { FORM_BODY, readsBodiesAs } from '../body-media.js';
import { heldFor, refuseUploadsOverBudget, reserveBudget } from '../budget.js';
import { newUsageDraft } from '../context.js';
import { resolveModel, routeOptions } from '../model-access.js';
import { boundaryOf, declaredTooLarge, fileAsTextField, type ParsedForm, readMultipart, tooLarge, UploadSpool } from '../multipart-spool.js';
import { refuseUploadsOverLimit } from '../plugins/rate-limit.js';
import type { Services } from '../services.js';
import { RESPONSE_FORMATS, renderTranscription, untoldSeconds, worstCaseSeconds } from '../transcript-render.js';
import { audioBill, estimatedAudioTokens, type UnitBill, worstAudioTokens } from '../unit-billing.js';
import { callUpstream, disarmedAfter, keyedRequestSignal, leftBeforeAnswer, setRoutingHeaders } from '../upstream-call.js';
import { transcriptionAtMost, transcriptionWithin } from '../usage-bounds.js';
import type { RouteDocs } from './docs.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The transcription route's upload spool, removed when the response ends (a keyed request's: when its calls end, if later). */
    spool: UploadSpool | null;
  }
}

const MAX_MODEL_ID = 200;
/** Voxtral's most `context_bias` terms (PROVIDERS §4.5), for every provider so that failover takes the same forms. */
const MAX_KEYWORDS = 100;
const MAX_LANGUAGES = 20;
/** The form's text fields: the few single ones, and the lists of keywords and languages at their longest. */
const MAX_FORM_FIELDS = 20 + MAX_KEYWORDS + MAX_LANGUAGES;
/** Fields sent as lists (`name[]`, or `name` repeated). */
const LIST_FIELDS = new Set(['timestamp_granularities', 'languages', 'keywords']);

export const TranscriptionForm = Type.Object(
  {
    file: Type.String({ contentMediaType: 'application/octet-stream', description: 'The audio file part (spooled to disk as it arrives)' }),
    model: Type.String({ minLength: 1, maxLength: MAX_MODEL_ID }),
    response_format: Type.Optional(
      Type.Union(
        RESPONSE_FORMATS.map((f) => Type.Literal(f)),
        { default: 'json' },
      ),
    ),
    language: Type.Optional(Type.String({ pattern: LANGUAGE_CODE, description: 'ISO-639-1 code of the spoken language' })),
    languages: Type.Optional(
      Type.Array(Type.String({ pattern: LANGUAGE_CODE }), {
        minItems: 1,
        maxItems: MAX_LANGUAGES,
        description: 'The languages the audio may be in (ISO-639-1): one is sent as `language`; with several the model detects it',
      }),
    ),
    keywords: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 200 }), {
        maxItems: MAX_KEYWORDS,
        description: "Names and terms to spell as written: Voxtral's `context_bias`; for Whisper, listed after the `prompt`",
      }),
    ),
    prompt: Type.Optional(Type.String({ maxLength: 4096 })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    timestamp_granularities: Type.Optional(Type.Array(Type.Union([Type.Literal('word'), Type.Literal('segment')]), { maxItems: 2 })),
    stream: Type.Optional(Type.Literal(false, { description: 'Streamed transcription is not offered' })),
  },
  { additionalProperties: false },
);
export type TranscriptionForm = Static<typeof TranscriptionForm>;

/** POST /audio/transcriptions, in its own plugin context so the multipart parser applies to it alone. */
export async function transcriptionsRoute(app: FastifyInstance, services: Services, docs: RouteDocs): Promise<void> {
  await app.register(async (scope) => {
    registerUploadSpool(scope, services);
    scope.post<{ Body: TranscriptionForm }>(
      '/audio/transcriptions',
      {
        config: { usageKind: 'audio' },
        schema: docs.operation('createTranscription', 'Speech-to-text (multipart; billed per audio second, or per token for an offer priced by tokens)', {
          consumes: ['multipart/form-data'],
          body: TranscriptionForm,
        }),
      },
      async (request, reply) => {
        // A keyed request runs on when its client leaves (keyedRequestSignal): its upload stays until its calls are over.
        const kept = request.headers[H.idempotencyKey] !== undefined && request.spool?.hold() === true ? request.spool : null;
        try {
          return await transcribeUpload(services, request, reply);
        } finally {
          kept?.release().catch(warnOnFailure(request.log, 'upload spool removal failed'));
        }
      },
    );
  });
}

/** The handler's work: the spooled upload checked, routed, transcribed and rendered. */
async function transcribeUpload(services: Services, request: FastifyRequest<{ Body: TranscriptionForm }>, reply: FastifyReply): Promise<FastifyReply | string> {
  const file = request.spool?.file;
  if (!file) {
    if (request.body.file !== undefined) throw fileAsTextField();
    throw new GatewayError('validation', "Invalid body: 'file' must be an audio file part.", { param: 'file' });
  }
  // Nothing to transcribe: refused here rather than sent (and billed) to a provider.
  if (file.size === 0) throw new GatewayError('validation', "Invalid body: 'file' is empty.", { param: 'file' });
  let head: Buffer;
  try {
    head = await readHead(file.path, file.size);
  } catch (err) {
    // The client left meanwhile and its spool went with it: nothing was drafted, so nothing to record.
    if (leftBeforeAnswer(reply.raw)) return reply;
    throw err;
  }
  // Bytes no provider could decode: refused here rather than sent (and, by a lenient one, billed).
  const container = audioContainer(head);
  if (container === null) throw notAudio();
  const body = request.body;
  const model = await resolveModel(services, request, body.model, 'audio');
  const format = body.response_format ?? 'json';
  const granularities = body.timestamp_granularities ?? [];
  if (granularities.length > 0 && format !== 'verbose_json') {
    throw new GatewayError('validation', "Invalid body: 'timestamp_granularities' needs response_format verbose_json.", {
      param: 'timestamp_granularities',
    });
  }
  const spoken = optional(body);
  // Recorded from here on: a request refused above for its body is not (docs/decisions.md, usage records).
  request.gw.usage = newUsageDraft('audio', model.id);
  const options = routeOptions(services, request);
  const seconds = Math.max(worstCaseSeconds(head, file.size), Math.ceil((await toldSeconds(file.path, head, file.size, container)) ?? 0));
  const worstTokens = worstAudioTokens(seconds);
  // `cheapest` compares what each offer would bill, per second or by its token prices.
  const worstCost = options.strategy === 'cheapest' ? (o: Offer) => audioBill(o.pricing, seconds, worstTokens).cost : undefined;
  const plan = planOffers(model, options, { promptTokens: 0, maxTokens: 0, worstCost });
  // Set before the hold, so that a client leaving during it leaves a keyed request running, recorded at its end.
  const signal = keyedRequestSignal(services, request, reply);
  const done = await disarmedAfter(signal, async () => {
    const holdCost = (o: Offer) => audioBill(o.pricing, seconds, worstTokens).cost;
    await reserveBudget(services, request, heldCost(plan, options.maxHops, holdCost));
    const upstream = transcriptionRequest(
      body,
      spoken,
      { ...file, filename: upstreamFilename(file.filename, container), contentType: CONTAINER_TYPES[container] },
      format !== 'json' && format !== 'text',
    );
    const call = { signal, requestId: request.id };
    return executePlan(
      plan,
      (offer) => callUpstream(services, request, offer, (a) => transcribe(a, upstream, { ...call, upstreamModel: offer.upstreamModel })),
      { health: options.stats, offers: model.offers, pin: options.pin, maxHops: options.maxHops, cost: heldFor(request, holdCost) },
    );
  });
  // A compressed upload quiet or coded below the lowest speech rate (Opus down to 0.5 kbit/s, FLAC or AAC of silence)
  // holds more seconds than its bytes say: its container's own length bounds its counts too, read (the file whole)
  // only when they pass the bytes' bound or none was told.
  const untold = done.value.billedSeconds <= 0;
  const own = untold || !transcriptionWithin(seconds, done.value) ? await containerSeconds(file.path, container) : null;
  // A provider that told no length (0 seconds) bills the gateway's reading of it, as a chat answer without usage, and
  // tells it as the duration (a transcript of 37 s was told 0, its one SRT or VTT cue 00:00:00 --> 00:00:00).
  if (untold) {
    const read = untoldSeconds(head, file.size, done.value.text, own);
    const duration = done.value.duration > 0 ? done.value.duration : Math.round(read * 100) / 100;
    done.value = { ...done.value, duration, billedSeconds: Math.max(1, Math.ceil(read)) };
  }
  // Counts above what the upload could cost (usage-bounds.ts) are billed, and told, at that bound.
  done.value = transcriptionAtMost(request.log, done.offer.provider, Math.max(seconds, Math.ceil(own ?? 0)), body, done.value);
  const billed = bill(request, done.offer, done.value);
  setRoutingHeaders(reply, request, done.offer, options.strategy, done.hops);
  const billedTokens = done.offer.pricing.per_unit === undefined ? { input: billed.promptTokens, output: billed.completionTokens } : undefined;
  const rendered = renderTranscription(done.value, format, { granularities, ...spoken, ...(billedTokens ? { billedTokens } : {}) });
  reply.type(rendered.contentType);
  // A provider key a provider echoed into its transcript does not reach the client (lib/redact.ts).
  return withoutKnownSecrets(typeof rendered.body === 'string' ? rendered.body : JSON.stringify(rendered.body));
}

function notAudio(): GatewayError {
  return new GatewayError(
    'validation',
    `Invalid body: 'file' is not audio in a format the gateway knows. Supported formats: ${AUDIO_EXTENSIONS.join(', ')} (WAV, MP3, FLAC, Ogg, MP4/M4A, WebM), told by the file's content.`,
    { param: 'file' },
  );
}

/**
 * Gives each request of this context a spool (removed when its response
 * closes, sent or cut, or a keyed request's calls are over if later) and
 * reads multipart bodies into it as they arrive.
 */
function registerUploadSpool(scope: FastifyInstance, services: Services): void {
  const limit = services.config.uploadLimitBytes;
  refuseUploadsOverLimit(scope, services);
  refuseUploadsOverBudget(scope, services);
  scope.decorateRequest('spool', null);
  scope.addHook('onRequest', async (request, reply) => {
    const spool = new UploadSpool(services.config.uploadDir ?? tmpdir());
    request.spool = spool;
    reply.raw.once('close', () => {
      spool.release().catch(warnOnFailure(request.log, 'upload spool removal failed'));
    });
  });
  // Only a form: a JSON (or any other) body is the wrong media type here, not a body that fails the form's schema.
  scope.removeAllContentTypeParsers();
  readsBodiesAs(scope, FORM_BODY);
  scope.addContentTypeParser('*', async (request: FastifyRequest) => {
    throw FORM_BODY.unsupported(request.headers);
  });
  scope.addContentTypeParser(FORM_BODY.type, async (request: FastifyRequest, payload: AsyncIterable<Buffer>) => {
    // As an Expect: 100-continue is refused: a missing boundary, then compression, then the declared size.
    const refused = FORM_BODY.encoded(request.headers);
    if (refused) throw refused;
    const boundary = boundaryOf(request.headers['content-type']);
    if (!boundary || !request.spool) throw FORM_BODY.unsupported(request.headers);
    const declared = Number(request.headers['content-length']);
    if (declaredTooLarge(declared, limit)) throw tooLarge(limit);
    const form = await readMultipart(payload, boundary, request.spool, { fileBytes: limit, fieldBytes: 64 * 1024, fields: MAX_FORM_FIELDS }, (name, value) =>
      refuseModelBeforeFile(services, request, name, value),
    );
    return formBody(form);
  });
  // No body at all (a bare POST, no Content-Type): no parser ran, and the JSON routes' words ("send a JSON object") would send the client astray.
  scope.addHook('preValidation', (request, _reply, done) => {
    if (request.body !== undefined) return done();
    done(new GatewayError('validation', "The request body is empty; send multipart/form-data with the audio as the file part 'file' and the 'model'."));
  });
}

/**
 * A `model` field read before the file part (openai-python and curl -F send the text fields first) naming a model
 * the key may not use is refused there, as the handler would refuse it, without reading the upload (up to the
 * limit) first. A model named after the file is checked once the whole form is read, as before: the file is read.
 */
function refuseModelBeforeFile(services: Services, request: FastifyRequest, name: string, value: string): void | Promise<void> {
  // An empty or over-long id is the schema's to refuse, in its own words.
  if (name !== 'model' || value.length === 0 || value.length > MAX_MODEL_ID) return;
  const model = resolveModel(services, request, value, 'audio');
  if (model instanceof Promise) return model.then(() => undefined);
}

/**
 * Fields of OpenAI's transcription that this gateway does not offer, and why: refused saying so, rather than as fields
 * it does not know (which reads as a typo). An object's parts come as `name[key]` (the SDK's `chunking_strategy[type]`).
 */
const NOT_OFFERED = new Map([
  ['include', 'is not offered: the providers behind this gateway give no logprobs of a transcript.'],
  ['chunking_strategy', 'is not offered: the audio is sent to the provider whole, and the provider cuts it itself; leave the field out.'],
  ['known_speaker_names', 'is not offered: transcripts here do not tell speakers apart (no diarization).'],
  ['known_speaker_references', 'is not offered: transcripts here do not tell speakers apart (no diarization).'],
]);

/** Form fields as the body schema sees them: `name[]` as `name`, numbers and booleans typed (left as text when they are not, so the schema names them). */
function formBody(form: ParsedForm): Record<string, unknown> {
  // No prototype: a field named `constructor` or `__proto__` is a field like any other (and an unknown one).
  const body: Record<string, unknown> = Object.create(null);
  for (const [raw, value] of form.fields) {
    const name = raw.endsWith('[]') ? raw.slice(0, -2) : raw;
    const bracket = name.indexOf('[');
    const field = bracket === -1 ? name : name.slice(0, bracket);
    const notOffered = NOT_OFFERED.get(field);
    if (notOffered !== undefined) throw new GatewayError('validation', `Invalid body: '${field}' ${notOffered}`, { param: field });
    // One value per field (but the lists): which of two models or formats to use is not for the gateway to guess.
    const list = LIST_FIELDS.has(name);
    if (!list && Object.hasOwn(body, name)) {
      throw new GatewayError('validation', `Invalid form: the field '${name}' is sent more than once.`, { param: name });
    }
    if (list) body[name] = [...((body[name] as string[] | undefined) ?? []), value];
    else if (name === 'temperature') body[name] = value.trim() !== '' && Number.isFinite(Number(value)) ? Number(value) : value;
    else if (name === 'stream') {
      if (value === 'true') {
        throw new GatewayError('validation', "Invalid body: 'stream' is not offered: a transcription is answered whole; leave it out or send false.", {
          param: 'stream',
        });
      }
      body[name] = value === 'false' ? false : value;
    } else body[name] = value;
  }
  if (form.file) body['file'] = form.file.filename;
  return body;
}

function optional(body: TranscriptionForm): { language?: string; temperature?: number } {
  const language = spokenLanguage(body);
  return {
    ...(language === undefined ? {} : { language }),
    ...(body.temperature === undefined ? {} : { temperature: body.temperature }),
  };
}

/**
 * The one language to send: `language`, or the only one of `languages[]` (OpenAI's newer field, which the AI SDK's
 * `languages` option sends). Of several, none: Whisper and Voxtral take one, and detect it among all when not told.
 * Both fields together must agree, `language` being one of the list.
 */
function spokenLanguage(body: TranscriptionForm): string | undefined {
  // ISO-639 codes are written lower case, as the hosts' lists of languages are ('EN' is 'en' to a client).
  const language = body.language?.toLowerCase();
  const languages = body.languages?.map((l) => l.toLowerCase());
  if (languages === undefined) return language;
  if (language !== undefined) {
    if (languages.includes(language)) return language;
    throw new GatewayError('validation', "Invalid body: 'language' is not one of 'languages'; send one of the two, or a language among the list.", {
      param: 'language',
    });
  }
  return languages.length === 1 || languages.every((l) => l === languages[0]) ? languages[0] : undefined;
}

function transcriptionRequest(
  body: TranscriptionForm,
  spoken: ReturnType<typeof optional>,
  file: TranscriptionRequest['file'],
  needSegments: boolean,
): TranscriptionRequest {
  return {
    file,
    granularities: body.timestamp_granularities ?? [],
    needSegments,
    ...spoken,
    ...(body.prompt === undefined ? {} : { prompt: body.prompt }),
    ...(body.keywords === undefined || body.keywords.length === 0 ? {} : { keywords: body.keywords }),
  };
}

function transcribe(adapter: ProviderAdapter, request: TranscriptionRequest, call: UpstreamCall): Promise<Transcription> {
  if (!adapter.transcribe) throw new UpstreamError({ kind: 'http', provider: adapter.id, status: 501, message: `${adapter.id} has no transcription endpoint` });
  return adapter.transcribe(request, call);
}

/** Per audio second, or (an offer without per_unit) per token: the provider's count, else the gateway's (docs/decisions.md). */
function bill(request: FastifyRequest, offer: Offer, t: Transcription): UnitBill {
  const billed = audioBill(offer.pricing, t.billedSeconds, t.tokens ?? estimatedAudioTokens(t.billedSeconds, t.text));
  const usage = request.gw.usage;
  if (!usage) return billed;
  usage.provider = offer.provider;
  usage.units = t.billedSeconds;
  usage.promptTokens = billed.promptTokens;
  usage.completionTokens = billed.completionTokens;
  usage.cost = billed.cost;
  return billed;
}
