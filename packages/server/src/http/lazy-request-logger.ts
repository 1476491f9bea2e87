import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import type { Bindings, ChildLoggerOptions, LevelWithSilent, Logger } from 'pino';
import { redactSecrets } from '../lib/redact.js';

/** The longest model id a request may name (the schemas' bound): a longer one is logged cut. */
const MODEL_CHARS = 200;

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * A request's logger that becomes a real pino child only when a line at
 * an enabled level is logged. Fastify gives every request a child logger
 * bound to its id; building it (bindings serialised, redaction set up) was
 * about 1% of a request's CPU, for a logger most requests never use at the
 * default levels of a busy gateway.
 */
export class LazyRequestLogger {
  private real: FastifyBaseLogger | null = null;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  get level(): LevelWithSilent {
    return (this.real?.level ?? this.parent.level) as LevelWithSilent;
  }

  set level(level: LevelWithSilent) {
    this.logger().level = level;
  }

  fatal(...args: unknown[]): void {
    this.log('fatal', args);
  }
  error(...args: unknown[]): void {
    this.log('error', args);
  }
  warn(...args: unknown[]): void {
    this.log('warn', args);
  }
  info(...args: unknown[]): void {
    this.log('info', args);
  }
  debug(...args: unknown[]): void {
    this.log('debug', args);
  }
  trace(...args: unknown[]): void {
    this.log('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger().child(bindings, options);
  }

  isLevelEnabled(level: string): boolean {
    return (this.real as Logger | null)?.isLevelEnabled(level) ?? this.parent.isLevelEnabled(level);
  }

  private log(level: Level, args: unknown[]): void {
    if (!this.isLevelEnabled(level)) return;
    (this.logger()[level] as (...a: unknown[]) => void)(...args);
  }

  private logger(): FastifyBaseLogger {
    this.real ??= this.parent.child(this.bindings, this.options);
    return this.real;
  }
}

/** Fastify's `childLoggerFactory`: a lazy child per request (a route with its own log level gets a real one, whose level decides). */
export function lazyChildLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  if (options.level !== undefined) return logger.child(bindings, options);
  return new LazyRequestLogger(logger as Logger, bindings, options) as unknown as FastifyBaseLogger;
}

/**
 * A request's end line (`res`: Fastify's reply, or the status the gateway logs itself with its request): its status,
 * the route it took, the id of the key it was made with, the model it named, the provider that answered it (or the
 * last one tried), the tokens or units its usage record bills and the error code it was answered with, so that the line alone says who got what from where. Read
 * only when the line is written.
 */
export function resForLog(res: { statusCode: number; request?: FastifyRequest }): EndLine {
  const request = res.request;
  if (request === undefined) return { statusCode: res.statusCode };
  const line: EndLine = { statusCode: res.statusCode, route: request.routeOptions.url ?? 'unmatched' };
  const gw = request.gw;
  if (!gw) return line;
  if (gw.key) line.keyId = gw.key.id;
  const usage = gw.usage ?? gw.usageDone;
  if (usage) {
    line.model = usage.model;
    if (usage.provider !== null) line.provider = usage.provider;
    // What the usage record bills, so that a key's spend can be followed in the log alone (0 where none was counted).
    if (usage.promptTokens > 0 || usage.completionTokens > 0) {
      line.promptTokens = usage.promptTokens;
      line.completionTokens = usage.completionTokens;
    }
    if (usage.units > 0) line.units = usage.units;
    if (usage.resumes !== undefined) line.resumes = usage.resumes;
  } else if (gw.key) {
    // Refused before a model was resolved (unknown, retired, not enabled): the id as the client wrote it, so that the
    // log alone says who still asks for a retired model. Client text: bounded, and anything shaped like a key removed.
    const named = (request.body as { model?: unknown } | undefined)?.model;
    if (typeof named === 'string') line.model = redactSecrets(named.length > MODEL_CHARS ? `${named.slice(0, MODEL_CHARS)}…` : named);
  }
  if (gw.errorCode !== null) line.code = gw.errorCode;
  return line;
}

// A type alias, not an interface: Fastify's serializer type wants an index signature, which only an alias gets implicitly.
type EndLine = {
  statusCode: number;
  route?: string;
  keyId?: string;
  model?: string;
  provider?: string;
  promptTokens?: number;
  completionTokens?: number;
  /** A resume's stream (the request id that started it). */
  resumes?: string;
  units?: number;
  code?: string;
};
