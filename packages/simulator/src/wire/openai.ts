/** The OpenAI-compatible hosts: Scaleway (fr-par), OVHcloud (GRA) and Nebius (eu-north1). */
import { demoPricing } from '../catalogue/demo.js';
import { bearer } from '../core/http.js';
import { transcriptionReply } from './openai-audio.js';
import { chatReply, checkChat } from './openai-chat.js';
import { embeddingsReply, scalewayRerankReply } from './openai-embed.js';
import { type OpenAIFlavor, renderOpenAIError } from './openai-errors.js';
import type { ErrorSpec, ProviderView, Reply, Route, Wire } from './types.js';

const OWNER: Record<OpenAIFlavor, string> = { scaleway: 'scaleway', ovh: 'ovhcloud', nebius: 'system' };

const OVH_JSON_LIMIT = 2 * 1024 * 1024;

/** Scaleway also serves project-scoped paths: /{project_id}/v1/... */
const PROJECT_PREFIX = /^\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?=\/v1\/)/;

export function openaiWire(flavor: OpenAIFlavor): Wire {
  return {
    type: 'openai',
    route(method, rawPath) {
      const path = flavor === 'scaleway' ? rawPath.replace(PROJECT_PREFIX, '') : rawPath;
      if (method === 'GET' && path === '/v1/models') return { endpoint: 'models', body: 'none', handle: (ctx) => modelsReply(flavor, ctx.provider, ctx.query) };
      if (method === 'GET' && path.startsWith('/v1/models/')) {
        const id = decodeURIComponent(path.slice('/v1/models/'.length));
        return { endpoint: 'models', body: 'none', handle: (ctx) => oneModelReply(flavor, ctx.provider, id) };
      }
      if (method !== 'POST') return null;
      const route = postRoute(flavor, path);
      if (route === null) return null;
      if (flavor === 'scaleway') return scalewayModelRequired(route);
      // OVHcloud caps JSON payloads at 2 MB (its audio endpoints take more): a larger body is a 413 (PROVIDERS §6).
      return flavor === 'ovh' && route.body === 'json' ? { ...route, maxBytes: OVH_JSON_LIMIT } : route;
    },
    auth(headers, apiKey) {
      const key = bearer(headers);
      if (key === undefined) return flavor === 'ovh' ? 'anonymous' : 'missing';
      return key === apiKey ? 'ok' : 'invalid';
    },
    error: (spec) => renderOpenAIError(flavor, spec),
  };
}

/** Scaleway answers a request that names no model as it does an unknown one: 422 (PROVIDERS §5). */
function scalewayModelRequired(route: Route): Route {
  return {
    ...route,
    handle: (ctx) =>
      ctx.model === null ? { type: 'error', error: { status: 422, kind: 'bad_request', message: 'Field required: model', param: 'model' } } : route.handle(ctx),
  };
}

function postRoute(flavor: OpenAIFlavor, path: string): Route | null {
  switch (path) {
    case '/v1/chat/completions':
      return chatRoute(flavor);
    case '/v1/embeddings':
      return { endpoint: 'embeddings', body: 'json', handle: (ctx) => embeddingsReply(ctx, { honourOptions: flavor !== 'scaleway', vllm: true }) };
    case '/v1/audio/transcriptions':
      return flavor === 'nebius'
        ? null
        : { endpoint: 'transcriptions', body: 'multipart', handle: (ctx) => transcriptionReply(ctx, 25 * 1024 * 1024, flavor === 'ovh') };
    case '/v1/rerank':
      return flavor === 'scaleway' ? { endpoint: 'rerank', body: 'json', handle: scalewayRerankReply } : null;
    default:
      return null;
  }
}

/** What Scaleway's Generative APIs document as unsupported (PROVIDERS.md 2): refused with a 400, whatever the value. */
const SCALEWAY_UNSUPPORTED = ['n', 'frequency_penalty', 'top_logprobs', 'logit_bias', 'user'] as const;

function unsupportedParameter(flavor: OpenAIFlavor, body: Record<string, unknown>): ErrorSpec | null {
  if (flavor !== 'scaleway') return null;
  const field = SCALEWAY_UNSUPPORTED.find((key) => body[key] !== undefined && body[key] !== null);
  return field === undefined ? null : { status: 400, kind: 'bad_request', message: `Parameter '${field}' is not supported.`, param: field };
}

function chatRoute(flavor: OpenAIFlavor): Route {
  return {
    endpoint: 'chat',
    body: 'json',
    handle(ctx): Reply {
      const bad = checkChat(ctx.json, ctx.provider, ctx.model) ?? unsupportedParameter(flavor, ctx.json as Record<string, unknown>);
      if (bad) return { type: 'error', error: bad };
      const model = ctx.model as string;
      const style = ctx.provider.settings.reasoningStyle;
      return chatReply(
        ctx.json as Record<string, unknown>,
        { provider: ctx.provider, responseModel: model, reasoningStyle: style, azure: null, vllm: true },
        model,
      );
    },
  };
}

function entry(flavor: OpenAIFlavor, p: ProviderView, id: string, verbose: boolean): Record<string, unknown> {
  const info = p.info(id);
  const base: Record<string, unknown> = { id, object: 'model', created: info.created, owned_by: OWNER[flavor] };
  if (!verbose) return base;
  const eur = demoPricing(p.id, id);
  const perToken = (eurPer1m: number): string => String(Number(((eurPer1m * 1.08) / 1e6).toPrecision(6)));
  const features = info.kind === 'chat' ? ['json_mode', 'structured_outputs', ...(info.tools ? ['tools'] : []), ...(info.reasoning ? ['reasoning'] : [])] : [];
  return {
    ...base,
    name: id.split('/').pop(),
    context_length: info.contextLength,
    pricing: { prompt: perToken(eur?.prompt_per_1m ?? 0.1), completion: perToken(eur?.completion_per_1m ?? 0.3) },
    architecture: {
      modality: info.kind === 'chat' ? (info.vision ? 'text+image->text' : 'text->text') : info.kind === 'embedding' ? 'text->embedding' : 'text->text',
    },
    supported_features: features,
    regions: [p.region],
    per_request_limits: null,
    quantization: 'fp8',
    supported_sampling_parameters: ['temperature', 'top_p', 'max_tokens', 'stop', 'seed', 'presence_penalty', 'frequency_penalty'],
    config: { max_tokens: Math.min(info.contextLength, 16_384) },
  };
}

function modelsReply(flavor: OpenAIFlavor, p: ProviderView, query: URLSearchParams): Reply {
  const verbose = flavor === 'nebius' && query.get('verbose') === 'true';
  return { type: 'json', body: { object: 'list', data: p.models().map((id) => entry(flavor, p, id, verbose)) } };
}

function oneModelReply(flavor: OpenAIFlavor, p: ProviderView, id: string): Reply {
  if (!p.hosts(id)) return { type: 'error', error: { status: 404, kind: 'model_not_found', model: id } };
  return { type: 'json', body: entry(flavor, p, id, flavor === 'nebius') };
}
