/** Azure OpenAI (PROVIDERS §9): deployment URLs with api-version, `api-key` auth, content filtering, its error shapes. */
import { AZURE_API_VERSION } from '../catalogue/demo.js';
import { header, isRecord, uuid } from '../core/http.js';
import { chatReply, checkChat } from './openai-chat.js';
import { embeddingsReply } from './openai-embed.js';
import { defaultMessage } from './openai-errors.js';
import type { ErrorSpec, HandlerCtx, ProviderView, RenderedError, Reply, Route, Wire } from './types.js';

const DEPLOYMENT = /^\/openai\/deployments\/([^/]+)\/(chat\/completions|embeddings)$/;
const API_VERSION = /^\d{4}-\d{2}-\d{2}(-preview)?$/;
/** The first api-version without the data plane's deployments list. */
const NO_DEPLOYMENTS_LIST_FROM = '2023-05-15';

export function azureWire(): Wire {
  return {
    type: 'azure',
    route(method, path) {
      if (method === 'GET') {
        if (path === '/openai/models') return versioned('models', (ctx) => modelsList(ctx.provider));
        // The data plane's deployments list went with api-version 2023-05-15; since, deployments are the control plane's.
        if (path === '/openai/deployments')
          return versioned('models', (ctx) =>
            (ctx.query.get('api-version') ?? '') < NO_DEPLOYMENTS_LIST_FROM
              ? deploymentsList(ctx.provider)
              : { type: 'error', error: { status: 404, kind: 'route_not_found' } },
          );
        if (path === '/openai/v1/models')
          return {
            endpoint: 'models',
            body: 'none',
            handle: (ctx) => ({
              type: 'json',
              body: {
                object: 'list',
                data: ctx.provider.models().map((id) => ({ id, object: 'model', created: ctx.provider.info(id).created, owned_by: 'system' })),
              },
            }),
          };
        return null;
      }
      if (method !== 'POST') return null;
      const m = DEPLOYMENT.exec(path);
      if (m) {
        const deployment = decodeURIComponent(m[1] ?? '');
        const endpoint = m[2] === 'embeddings' ? 'embeddings' : 'chat';
        return { ...versioned(endpoint, (ctx) => (endpoint === 'chat' ? chat(ctx, deployment, true) : embed(ctx, deployment))), pathModel: deployment };
      }
      if (path === '/openai/v1/chat/completions') return { endpoint: 'chat', body: 'json', handle: (ctx) => chat(ctx, ctx.model, false) };
      if (path === '/openai/v1/embeddings') return { endpoint: 'embeddings', body: 'json', handle: (ctx) => embed(ctx, ctx.model) };
      return null;
    },
    auth(headers, apiKey) {
      const key = header(headers, 'api-key');
      if (key === undefined) return header(headers, 'authorization') === undefined ? 'missing' : 'invalid';
      return key === apiKey ? 'ok' : 'invalid';
    },
    error: renderError,
    headers: () => ({
      'apim-request-id': uuid(),
      'x-request-id': uuid(),
      'x-ms-region': 'Sweden Central',
      'x-ratelimit-remaining-requests': '999',
      'x-ratelimit-remaining-tokens': '999000',
    }),
  };
}

/** A dated-API route: answers 404 "Resource not found" without a valid api-version. */
function versioned(endpoint: Route['endpoint'], handle: (ctx: HandlerCtx) => Reply): Route {
  const body = endpoint === 'models' ? 'none' : 'json';
  return {
    endpoint,
    body,
    handle(ctx) {
      const v = ctx.query.get('api-version');
      if (v === null || !API_VERSION.test(v)) return { type: 'error', error: { status: 404, kind: 'route_not_found' } };
      return handle(ctx);
    },
  };
}

function chat(ctx: HandlerCtx, deployment: string | null, dated: boolean): Reply {
  if (deployment === null || !ctx.provider.hosts(deployment))
    return { type: 'error', error: { status: 404, kind: 'model_not_found', ...(deployment ? { model: deployment } : {}) } };
  const body = ctx.json;
  const version = ctx.query.get('api-version') ?? AZURE_API_VERSION;
  if (dated && isRecord(body) && body['stream_options'] !== undefined && version < '2024-09-01-preview') {
    return { type: 'error', error: { status: 400, kind: 'bad_request', message: 'Unrecognized request argument supplied: stream_options' } };
  }
  const bad =
    checkChat(body, ctx.provider, deployment) ??
    completionCaps(body, dated ? version : null) ??
    emptyTools(body) ??
    untypedToolCall(body) ??
    assistantPartType(body);
  if (bad) return { type: 'error', error: bad };
  const f = ctx.fault;
  if (f?.kind === 'content_filter' && f.on === 'prompt') return promptFiltered();
  const info = ctx.provider.info(deployment);
  return chatReply(
    body as Record<string, unknown>,
    {
      provider: ctx.provider,
      responseModel: info.servedModel ?? deployment,
      reasoningStyle: 'reasoning_content',
      azure: { asyncFilter: ctx.provider.settings.asyncContentFilter, filterCompletion: f?.kind === 'content_filter' && f.on === 'completion' },
    },
    deployment,
  );
}

/**
 * OpenAI's API (Azure's with it) refuses both caps at once; api-versions before 2024-09-01-preview do not know
 * `max_completion_tokens` at all (`version` null: the v1 API, which does).
 */
function completionCaps(body: unknown, version: string | null): ErrorSpec | null {
  if (!isRecord(body) || body['max_completion_tokens'] == null) return null;
  if (version !== null && version < '2024-09-01-preview')
    return { status: 400, kind: 'bad_request', message: 'Unrecognized request argument supplied: max_completion_tokens' };
  if (body['max_tokens'] == null) return null;
  return {
    status: 400,
    kind: 'bad_request',
    message: "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
    param: 'max_tokens',
  };
}

/** OpenAI's API (Azure's with it) refuses an empty `tools` list: at least one tool, or none of the key. */
function emptyTools(body: unknown): ErrorSpec | null {
  if (!isRecord(body) || !Array.isArray(body['tools']) || body['tools'].length > 0) return null;
  return {
    status: 400,
    kind: 'bad_request',
    message: "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead.",
    param: 'tools',
  };
}

/**
 * OpenAI's API (Azure's with it) refuses a tool call of the history without its `type`, which its schema requires, and
 * an empty `tool_calls` list (at least one call, or none of the key).
 */
function untypedToolCall(body: unknown): ErrorSpec | null {
  const messages = isRecord(body) && Array.isArray(body['messages']) ? body['messages'] : [];
  for (const [i, m] of messages.entries()) {
    const calls = isRecord(m) && Array.isArray(m['tool_calls']) ? m['tool_calls'] : [];
    if (isRecord(m) && Array.isArray(m['tool_calls']) && calls.length === 0) {
      const param = `messages[${i}].tool_calls`;
      return {
        status: 400,
        kind: 'bad_request',
        message: `Invalid '${param}': empty array. Expected an array with minimum length 1, but got an empty array instead.`,
        param,
      };
    }
    const j = calls.findIndex((c) => !isRecord(c) || c['type'] === undefined);
    if (j === -1) continue;
    const param = `messages[${i}].tool_calls[${j}].type`;
    return { status: 400, kind: 'bad_request', message: `Missing required parameter: '${param}'.`, param };
  }
  return null;
}

/** OpenAI's API (Azure's with it) takes an assistant's content parts of types `text` and `refusal` only (a `thinking` part is Mistral's). */
function assistantPartType(body: unknown): ErrorSpec | null {
  const messages = isRecord(body) && Array.isArray(body['messages']) ? body['messages'] : [];
  for (const [i, m] of messages.entries()) {
    const parts = isRecord(m) && m['role'] === 'assistant' && Array.isArray(m['content']) ? m['content'] : [];
    const j = parts.findIndex((p) => !isRecord(p) || (p['type'] !== 'text' && p['type'] !== 'refusal'));
    if (j === -1) continue;
    const type = isRecord(parts[j]) ? String(parts[j]['type']) : String(parts[j]);
    const param = `messages[${i}].content[${j}].type`;
    return { status: 400, kind: 'bad_request', message: `Invalid value: '${type}'. Supported values are: 'text' and 'refusal'.`, param };
  }
  return null;
}

function embed(ctx: HandlerCtx, deployment: string | null): Reply {
  if (deployment === null || !ctx.provider.hosts(deployment))
    return { type: 'error', error: { status: 404, kind: 'model_not_found', ...(deployment ? { model: deployment } : {}) } };
  const served = ctx.provider.info(deployment).servedModel ?? deployment;
  return embeddingsReply({ ...ctx, model: deployment }, { honourOptions: true, vllm: false, responseModel: served });
}

function promptFiltered(): Reply {
  const hit = { filtered: true, severity: 'high' };
  const safe = { filtered: false, severity: 'safe' };
  return {
    type: 'json',
    status: 400,
    body: {
      error: {
        message:
          "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        type: null,
        param: 'prompt',
        code: 'content_filter',
        status: 400,
        innererror: {
          code: 'ResponsibleAIPolicyViolation',
          content_filter_result: { hate: safe, jailbreak: { filtered: false, detected: false }, self_harm: safe, sexual: safe, violence: hit },
        },
      },
    },
  };
}

function renderError(spec: ErrorSpec): RenderedError {
  const s = spec.status;
  switch (spec.kind) {
    case 'auth_missing':
      return {
        status: 401,
        body: {
          error: {
            code: '401',
            message: spec.message ?? 'Access denied due to missing subscription key. Make sure to include subscription key when making requests to an API.',
          },
        },
      };
    case 'auth_invalid':
      return {
        status: s,
        body: {
          error: {
            code: String(s),
            message:
              spec.message ??
              'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
          },
        },
      };
    case 'route_not_found':
      return { status: s, body: { error: { code: '404', message: spec.message ?? 'Resource not found' } } };
    case 'model_not_found':
      return {
        status: s,
        body: {
          error: {
            code: 'DeploymentNotFound',
            message:
              spec.message ??
              'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.',
          },
        },
      };
    case 'rate_limit': {
      // Azure's message names the same wait as its headers; the gateway reads it where they have none.
      const wait = spec.retryAfterS ?? 1;
      const message =
        spec.message ??
        `Requests to the ChatCompletions_Create Operation under Azure OpenAI API version ${AZURE_API_VERSION} have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after ${wait} second${wait === 1 ? '' : 's'}. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.`;
      const headers =
        spec.variant === 1
          ? { 'x-ratelimit-reset-tokens': `${wait}s`, 'x-ratelimit-remaining-tokens': '0' }
          : { 'retry-after': String(wait), 'x-ratelimit-remaining-requests': '0' };
      return { status: s, body: { error: { code: '429', message } }, headers, noRetryAfter: spec.variant === 1 };
    }
    case 'unavailable':
      return {
        status: s,
        body: {
          error: { code: 'ServiceUnavailable', message: spec.message ?? 'The service is temporarily unable to process your request. Please try again later.' },
        },
      };
    case 'server':
      return {
        status: s,
        body: {
          error: {
            message: spec.message ?? 'The server had an error while processing your request. Sorry about that!',
            type: 'server_error',
            param: null,
            code: null,
          },
        },
      };
    default:
      return {
        status: s,
        body: {
          error: {
            message: spec.message ?? defaultMessage(spec),
            type: s < 500 ? 'invalid_request_error' : 'server_error',
            param: spec.param ?? null,
            code: null,
          },
        },
      };
  }
}

const CREATED_AT = 1_721_260_800;

/** What the resource can deploy, by model version (`gpt-4o-mini-2024-07-18`), not its deployments (PROVIDERS.md, section 9). */
function modelsList(p: ProviderView): Reply {
  const data = p.models().map((deployment) => {
    const info = p.info(deployment);
    return {
      id: info.servedModel ?? deployment,
      object: 'model',
      created_at: CREATED_AT,
      status: 'succeeded',
      lifecycle_status: 'generally-available',
      capabilities: { chat_completion: info.kind === 'chat', completion: false, embeddings: info.kind === 'embedding', fine_tune: false, inference: true },
      deprecation: { inference: info.deprecation ? Date.parse(info.deprecation) / 1000 : 1_767_225_600 },
    };
  });
  return { type: 'json', body: { data, object: 'list' } };
}

function deploymentsList(p: ProviderView): Reply {
  const data = p.models().map((id) => ({
    id,
    model: p.info(id).servedModel ?? id,
    owner: 'organization-owner',
    status: 'succeeded',
    created_at: CREATED_AT,
    updated_at: CREATED_AT,
    object: 'deployment',
    scale_settings: { scale_type: 'standard' },
  }));
  return { type: 'json', body: { data, object: 'list' } };
}
